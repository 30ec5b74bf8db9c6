#!/usr/bin/env bash
# One link of a chained training run on a GPU machine lent for short calls (here: 10 minutes a call, files
# back at most 16 MiB each, 64 MiB in all): `zoo fit` of RECIPE with recipes/trainer/gpu.yaml ($TRAINER) for
# MAX_TIME, from the weights of the previous link when INIT (a `zoo export` folder) is given; then the
# best checkpoint (the last one if no validation ran) is evaluated exactly on the full validation and
# test splits and exported in float32.
#
# Writes to $OUT (default ./gpu-link):
#   run.tar               metrics.csv and config.yaml of the run, fit.log, valid.json, test.json
#   weights.tar.part-*    the exported folder in 15 MiB pieces (next link: cat weights.tar.part-* | tar x)
#
# A link starts its optimizer, learning-rate schedule and metrics.csv's counts (train/tokens, train/seconds)
# afresh: the optimizer's state is twice the weights, more than comes back. $LINK (default 0), the link's
# number, seeds it (seed_everything), so that each link draws its own order of the training batches.
#
# Usage: scripts/gpu_train_link.sh RECIPE MAX_TIME [INIT|-] [zoo fit/validate/test overrides...]
#   scripts/gpu_train_link.sh recipes/hmm/ptb-rank-space.yaml 00:00:06:40
#   scripts/gpu_train_link.sh recipes/hmm/ptb-rank-space.yaml 00:00:06:40 link1/export
set -u
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }  # the comment above
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [ $# -lt 2 ]; then usage >&2; exit 2; fi
recipe=$1 max_time=$2 init=${3:--}
shift $(($# < 3 ? $# : 3))
out=${OUT:-gpu-link} trainer=${TRAINER:-recipes/trainer/gpu.yaml}
run=$(mktemp -d)
mkdir -p "$out" "$run/report"
configs=(--config "$recipe" --config "$trainer" --seed_everything "${LINK:-0}")
[ "$init" != - ] && configs+=(--model.init_args.init_from "$init")
start=$SECONDS
python3 -m zoo.cli fit "${configs[@]}" --trainer.max_time "$max_time" --trainer.default_root_dir "$run" \
    --trainer.val_check_interval 1500 "$@" >"$run/report/fit.log" 2>&1
echo "fit: exit $? in $((SECONDS - start)) s"
# the run's folder: the one with metrics.csv and the checkpoints (where tensorboard is installed, its
# logger writes another version_N beside it)
version=$(dirname "$(ls "$run"/lightning_logs/version_*/checkpoints/last.ckpt | head -n 1)")
version=${version%/checkpoints}
cp "$version"/metrics.csv "$version"/config.yaml "$run/report/"
checkpoint=$version/checkpoints/best.ckpt
[ -f "$checkpoint" ] || checkpoint=$version/checkpoints/last.ckpt
echo "evaluating $checkpoint"
for split in validate test; do
    python3 -m zoo.cli "$split" --config "$recipe" --config "$trainer" "$@" \
        --ckpt_path "$checkpoint" --data.init_args.batch_tokens 2048 --trainer.logger false \
        --trainer.default_root_dir "$run/$split" \
        --results "$run/report/$split.json" >"$run/report/$split.log" 2>&1
    echo "$split: exit $?: $(tr -d '\n ' <"$run/report/$split.json" 2>/dev/null)"
done
python3 -m zoo.cli export "$checkpoint" "$run/export" --results "$run/report/test.json" \
    --training-config "$version/config.yaml" --max-shard-size 15MB >"$run/report/export.log" 2>&1
echo "export: exit $?: $(ls "$run/export" 2>/dev/null | tr '\n' ' ')"
tar -C "$run" -cf "$out/run.tar" report
tar -C "$run" -cf - export | split -b 15M - "$out/weights.tar.part-"
ls -l "$out"
echo "link done in $((SECONDS - start)) s"
