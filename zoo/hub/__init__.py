"""The zoo's checkpoint and Hub package: the architecture and pretrained-tag registry, the built-in
architectures, the pretrained-folder format and ``from_pretrained``, Lightning checkpoints as initial
weights, export, model cards (with the papers' published numbers) and the bundled weights."""
