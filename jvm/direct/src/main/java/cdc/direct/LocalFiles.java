package cdc.direct;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (its checksums kept), setting a file's permissions through
 * {@code java.nio} where Hadoop, without its native library, runs a {@code chmod} process for
 * every file and directory it creates: about 5 ms each, two for a file with its checksum, and a
 * batch's commit writes several (the data, deletion vector and memory files, manifests, the
 * manifest list, the table's metadata). The session's {@code fs.file.impl}.
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
}
