package cdc.direct;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (its checksums kept), setting a file's permissions through
 * {@code java.nio} where Hadoop, without its native library, runs a {@code chmod} process for
 * every file and directory it creates: about 5 ms each, two for a file with its checksum, and a
 * batch's commit writes several (the data, deletion vector and memory files, manifests, the
 * manifest list, the table's metadata). The session's {@code fs.file.impl}; {@link Context} is the
 * same for Hadoop's FileContext (Spark's streaming checkpoints).
 */
public final class LocalFiles extends LocalFileSystem {
  public LocalFiles() {
    super(new Raw());
  }

  /** The raw local file system under the checksums, with the permissions set in the JVM. */
  static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (NativeIO.isAvailable() || permission.getStickyBit()) {
        super.setPermission(p, permission);
        return;
      }
      try {
        Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(permission.toString()));
      } catch (UnsupportedOperationException e) {  // not a POSIX file system: Hadoop's own way
        super.setPermission(p, permission);
      }
    }
  }

  /** Hadoop's local FileContext file system ({@code LocalFs}) over {@link Raw}: the session's
   * {@code fs.AbstractFileSystem.file.impl}. */
  public static final class Context extends ChecksumFs {
    public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawContext(uri, conf));
    }
  }

  /** Hadoop's {@code RawLocalFs}, over {@link Raw}. */
  static final class RawContext extends DelegateToFileSystem {
    RawContext(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }
}
