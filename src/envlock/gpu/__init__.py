"""What a wheel's or a venv's binaries carry for NVIDIA GPUs, and what a machine's GPUs and driver can run.

Read from the files alone, without a GPU or the CUDA tools: ``elf`` reads an ELF's headers (its
``DT_NEEDED`` libraries, its ``.nv_fatbin`` section), ``fatbin`` the fatbin entry headers in it (SASS
or PTX, arch, ``a``/``f`` variant, compression), ``binaries`` every ELF of a wheel (the zip's
central directory, then each member's headers, streamed where it is compressed) or a folder, kept
per wheel sha256 in the store; ``coverage`` says which GPUs a file's kernels run on, ``drivers`` the
driver a CUDA major needs, ``nvml`` asks this machine's driver (ctypes on ``libnvidia-ml.so.1``).
Modules here import only envlock's foundations (docs/architecture.md).
"""
