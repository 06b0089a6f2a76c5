"""docs/config.md is the generated config reference, in sync with configs/base.py."""
import os

from ada_jax import config_doc
from configs import base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_field_has_a_meaning_and_no_stale_entries():
    fields = config_doc.config_fields(base.get_config(""))
    assert not set(fields) - set(config_doc.FIELDS), "add these to ada_jax/config_doc.FIELDS"
    assert not set(config_doc.FIELDS) - set(fields), "gone from the config"
    assert all(meaning and other for meaning, other in config_doc.FIELDS.values())


def test_docs_config_md_is_up_to_date():
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        assert f.read() == config_doc.reference(base.get_config), (
            "regenerate: python scripts/tools/config_reference.py > docs/config.md")
