"""The one exception type for unusable input."""


class DecodeError(ValueError):
    """Input that cannot be decoded: names where (file, slot) and why."""

    def __init__(self, reason: str, *, slot: int | None = None, source: str | None = None):
        self.reason = reason
        self.slot = slot
        self.source = source
        where = []
        if source:
            where.append(str(source))
        if slot is not None:
            where.append(f"slot {slot}")
        super().__init__(f"{': '.join(where)}: {reason}" if where else reason)
