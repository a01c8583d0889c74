package cdc.direct;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotAncestryValidator;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.util.SnapshotUtil;

/**
 * The offsets compare-and-swap of a batch's commit to an Iceberg target: the commit applies only
 * while the newest snapshot of the target's history that carries cdc offsets carries those the
 * batch started from (its summary's {@code cdc.offsets-before}, none when the table had none).
 * Checked inside the commit, after each refresh of its retries, so a second writer of the table
 * or a rollback under the job is found at the commit, never after it.
 */
public final class OffsetsCheck implements SnapshotAncestryValidator {
  static final String OFFSETS = "cdc.offsets";  // control/commits.py OFFSETS
  static final String BEFORE = "cdc.offsets-before";  // control/commits.py OFFSETS_BEFORE
  static final String JOB = "cdc.job";
  /** The start of the message of a commit that lost (jobs/apply.py reads it). */
  public static final String MOVED = "cdc offsets moved";
  static final String WAP_ID = "wap.id";  // Iceberg's SnapshotSummary.STAGED_WAP_ID_PROP
  static final int PUBLISH_ATTEMPTS = 4;

  private final String expected;
  private String found;
  private Long foundIn;
  private String foundJob;

  private OffsetsCheck(String expected) {
    this.expected = expected;
  }

  /** The check of a commit carrying {@code summary}; null when the commit carries no offsets. */
  public static OffsetsCheck of(Map<String, String> summary) {
    return summary.containsKey(OFFSETS) ? new OffsetsCheck(summary.get(BEFORE)) : null;
  }

  @Override
  public boolean validate(Iterable<Snapshot> ancestry) {
    Snapshot oldest = null;
    for (Snapshot s : ancestry) {
      oldest = s;
      String offsets = s.summary().get(OFFSETS);
      if (offsets != null) {
        found = offsets;
        foundIn = s.snapshotId();
        foundJob = s.summary().get(JOB);
        return offsets.equals(expected);
      }
    }
    // No snapshot carries offsets: the table never had any, or an expiry cut the history below
    // its last one (its oldest snapshot kept has a parent), which tells nothing either way.
    return expected == null || (oldest != null && oldest.parentId() != null);
  }

  @Override
  public String errorMessage() {
    return MOVED + ": the batch started from " + (expected == null ? "no offsets" : expected)
        + " but the table's last commit with offsets " + (found == null ? "has none"
        : "(snapshot " + foundIn + ", job " + foundJob + ") ends at " + found);
  }

  /**
   * Publish the snapshot a MERGE staged (write-audit-publish: {@code wap.id} {@code wapId}) as the
   * table's current one: only while the table's current snapshot is the one it was staged on and
   * the offsets check of its summary holds, in one metadata commit that fails if the table moved
   * meanwhile. A staged snapshot that cannot be published is removed with the files it added, then
   * a ValidationException says why: a commit that moved the offsets ({@link #MOVED}), or another
   * commit in between (a conflict: the batch is applied again). False when the MERGE staged none
   * (it changed nothing: the caller commits the summary alone).
   */
  public static boolean publish(Table table, String wapId) {
    TableOperations ops = ((HasTableOperations) table).operations();
    for (int attempt = 1; ; attempt++) {
      TableMetadata base = ops.refresh();
      Snapshot staged = staged(base, wapId);
      if (staged == null) {
        return false;
      }
      Snapshot head = base.currentSnapshot();
      Long headId = head == null ? null : head.snapshotId();
      OffsetsCheck check = of(staged.summary());
      String refused = null;
      if (!java.util.Objects.equals(staged.parentId(), headId)) {
        refused = "the table was committed to while the batch's MERGE was staged (snapshot " + headId + ")";
      } else if (check != null && !check.validate(staged.parentId() == null ? List.of()
          : SnapshotUtil.ancestorsOf(staged.parentId(), base::snapshot))) {
        refused = check.errorMessage();
      }
      if (refused != null) {
        discard(ops, base, staged);
        throw new ValidationException("Snapshot ancestry validation failed: %s", refused);
      }
      TableMetadata published = TableMetadata.buildFrom(base)
          .setBranchSnapshot(staged.snapshotId(), SnapshotRef.MAIN_BRANCH).build();
      try {
        ops.commit(base, published);
        table.refresh();
        return true;
      } catch (CommitFailedException e) {
        if (attempt == PUBLISH_ATTEMPTS) {
          throw e;
        }
      }
    }
  }

  /** The snapshot staged with {@code wapId} in {@code base} (null: none). */
  static Snapshot staged(TableMetadata base, String wapId) {
    Snapshot staged = null;
    for (Snapshot s : base.snapshots()) {
      if (wapId.equals(s.summary().get(WAP_ID)) && (staged == null || s.sequenceNumber() > staged.sequenceNumber())) {
        staged = s;
      }
    }
    return staged;
  }

  /** Remove a staged snapshot no ref reaches from the metadata, then delete the files only it added. */
  static void discard(TableOperations ops, TableMetadata base, Snapshot staged) {
    FileIO io = ops.io();
    List<String> files = new ArrayList<>();
    for (DataFile f : staged.addedDataFiles(io)) {
      files.add(f.location());
    }
    for (DeleteFile f : staged.addedDeleteFiles(io)) {
      files.add(f.location());
    }
    for (ManifestFile m : staged.allManifests(io)) {
      if (m.snapshotId() != null && m.snapshotId() == staged.snapshotId()) {
        files.add(m.path());
      }
    }
    if (staged.manifestListLocation() != null) {
      files.add(staged.manifestListLocation());
    }
    TableMetadata current = base;
    for (int attempt = 1; attempt <= PUBLISH_ATTEMPTS; attempt++) {
      try {
        ops.commit(current, TableMetadata.buildFrom(current).removeSnapshots(List.of(staged)).build());
        break;
      } catch (CommitFailedException e) {
        current = ops.refresh();
        if (attempt == PUBLISH_ATTEMPTS) {
          return;  // still in the metadata: its files stay for `cdc maintain`'s orphan cleanup
        }
      } catch (CommitStateUnknownException e) {
        return;  // maybe removed, maybe not: its files stay
      }
    }
    files.forEach(io::deleteFile);
  }
}
