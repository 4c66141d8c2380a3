"""Weight formats, exact: what each of a model's arrays becomes in a format's file, in tensors,
shapes, dtypes and bytes, and that file written and weighed.

- ``formats``: the format names and their options (pure Python, read by the CLI and the links).
- ``tables``: the data model: a format's tensors of each array, and their bytes.
- ``linears``: the arrays the forward contracts, and along which axes, found by qwix in the real
  Flax forward.
- ``layouts``: each format's tensors of each array (qwix's own arrays; GPTQ, AWQ as their tools lay
  them out; GGUF by llama.cpp's rules in ``gguf_layout``; bitsandbytes and FP8 files in
  ``bnb_fp8_layout``), for the model and for one device.
"""
