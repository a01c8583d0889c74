"""The session settings a statement sets for itself (sinks/session.py: conf_for_block)."""
import pytest


def test_settings_for_a_block_are_unset_after_it_or_set_back(spark):
    """What a statement's session settings (a commit's stamp, a write's distribution) leave."""
    from cdc.sinks.session import conf_for_block

    spark.conf.set("cdc.test.given", "theirs")
    try:
        with conf_for_block(spark, {"cdc.test.given": "ours", "cdc.test.new": "x"}, restore=True):
            assert (spark.conf.get("cdc.test.given"), spark.conf.get("cdc.test.new")) == ("ours", "x")
        assert spark.conf.get("cdc.test.given") == "theirs" and spark.conf.get("cdc.test.new", None) is None
        with pytest.raises(ValueError):
            with conf_for_block(spark, {"cdc.test.stamp": "1"}):
                raise ValueError("the statement failed")
        assert spark.conf.get("cdc.test.stamp", None) is None
    finally:
        spark.conf.unset("cdc.test.given")
