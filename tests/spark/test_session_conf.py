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



def test_local_files_are_written_as_hadoop_writes_them(spark, tmp_path):
    """The session's local file system (jvm/direct, LocalFiles: permissions set in the JVM, no
    `chmod` process) makes files and directories of the same modes as Hadoop's own, checksums
    beside them."""
    import os

    jvm = spark._jvm
    conf, root = spark._jsc.hadoopConfiguration(), jvm.java.net.URI("file:///")
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(root, conf)
    hadoops = jvm.org.apache.hadoop.fs.LocalFileSystem()
    hadoops.initialize(root, conf)
    assert ours.getClass().getName() == "cdc.direct.LocalFiles"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(root, conf)  # Spark's checkpoints
    assert context.getDefaultFileSystem().getClass().getName() == "cdc.direct.LocalFiles$Context"
    for name, fs in (("ours", ours), ("hadoops", hadoops)):
        out = fs.create(jvm.org.apache.hadoop.fs.Path((tmp_path / name / "file").as_uri()), False)
        out.write(b"abc")
        out.close()
    flags = jvm.java.util.EnumSet.of(jvm.org.apache.hadoop.fs.CreateFlag.CREATE)
    context.mkdir(jvm.org.apache.hadoop.fs.Path((tmp_path / "context").as_uri()),
                  jvm.org.apache.hadoop.fs.permission.FsPermission.getDirDefault(), True)
    out = context.create(jvm.org.apache.hadoop.fs.Path((tmp_path / "context" / "file").as_uri()), flags,
                         spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.CreateOpts, 0))
    out.write(b"abc")
    out.close()
    assert all((tmp_path / name / ".file.crc").exists() for name in ("ours", "hadoops", "context"))
    for name in ("ours", "context"):
        for path in ("", "file"):
            assert os.stat(tmp_path / name / path).st_mode == os.stat(tmp_path / "hadoops" / path).st_mode
