"""Print the config reference (docs/config.md): every config field, its default, meaning and
the nearest verl / TRL setting.

  python scripts/tools/config_reference.py > docs/config.md
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from ada_jax.config_doc import reference  # noqa: E402
from configs import base  # noqa: E402

if __name__ == "__main__":
    sys.stdout.write(reference(base.get_config))
