"""What host_decode must work without: the packages made unimportable by the numpy-only tests."""

BLOCKED = ["torch", "cutlass", "cuda", "perfetto", "google", "rich", "tqdm", "matplotlib", "orjson", "msgspec", "scipy"]
