"""A policy's settings, declared once in its own module: each field of its group
`adaptive.<module name>.<field>` with its default, its meaning, its name elsewhere (the
authors' code, other libraries) and how the config check validates it. configs/base.py takes
the defaults, ada_jax/config_doc.py the meanings and ada_jax/config_check.py the kinds from the
registry (`collect.groups`); the module's own `check(config)` checks what involves several
fields. No jax here."""
import dataclasses

# How config_check validates a field: a positive integer, a finite number > 0 / >= 0, a number
# in [0, 1] / [0, 1), one of the given strings ("choice:a/b"), True or False, or nothing here
# (the module's check does it).
KINDS = ("positive_int", "positive", "non_negative", "unit", "open_unit", "bool", "any")


@dataclasses.dataclass(frozen=True)
class Setting:
    default: object
    meaning: str
    elsewhere: str = "—"  # the authors' (or verl's / TRL's) name for it
    kind: str = "any"

    def __post_init__(self):
        if self.kind not in KINDS and not self.kind.startswith("choice:"):
            raise ValueError(f"setting kind {self.kind!r}: choose from {KINDS} or choice:a/b")
