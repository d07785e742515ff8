/*
 * Repeated loads through one Java client, whose RESTTableCache (on by default since Iceberg
 * 1.11) keeps each table with its ETag and sends If-None-Match: what a long Spark or Flink job
 * does to a catalog between its writes.
 */
package dev.icecache.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.StorageCredential;
import org.apache.iceberg.io.SupportsStorageCredentials;
import org.apache.iceberg.rest.RESTCatalog;

final class Loads {
  private Loads() {}

  /** Loads one table `times` times through one client; the metadata location of each load. */
  static JsonNode repeat(Map<String, String> properties, String table, int times)
      throws Exception {
    ArrayNode locations = Agent.JSON.createArrayNode();
    try (RESTCatalog catalog = Scenario.catalog("loads", properties)) {
      TableIdentifier id = TableIdentifier.parse(table);
      for (int i = 0; i < times; i++) {
        locations.add(((BaseTable) catalog.loadTable(id)).operations().current().metadataFileLocation());
      }
    }
    return locations;
  }

  /**
   * One client loads a table (so that its cache holds it), another client commits to it, and
   * the first loads it again: what each saw.
   */
  static JsonNode commitSeen(Map<String, String> properties, String table) throws Exception {
    ObjectNode seen = Agent.JSON.createObjectNode();
    try (RESTCatalog reader = Scenario.catalog("reader", properties);
        RESTCatalog writer = Scenario.catalog("writer", properties)) {
      TableIdentifier id = TableIdentifier.parse(table);
      reader.loadTable(id);
      seen.put("before", snapshotId(reader.loadTable(id)));
      Table written = writer.loadTable(id);
      Scenario.append(written, (int) (System.nanoTime() % 1000) + 10);
      seen.put("committed", snapshotId(writer.loadTable(id)));
      seen.put("after", snapshotId(reader.loadTable(id)));
    }
    return seen;
  }

  /**
   * Loads a table `times` times, `interval` apart, through one client, and reports at each load
   * the earliest expiry among the credentials the client then holds for it, beside its clock.
   */
  static JsonNode credentialsOverTime(
      Map<String, String> properties, String table, int times, long interval) throws Exception {
    ArrayNode loads = Agent.JSON.createArrayNode();
    try (RESTCatalog catalog = Scenario.catalog("credentials", properties)) {
      TableIdentifier id = TableIdentifier.parse(table);
      for (int i = 0; i < times; i++) {
        Table loaded = catalog.loadTable(id);
        long now = System.currentTimeMillis();
        ObjectNode load = loads.addObject();
        load.put("now-ms", now);
        load.put("expires-at-ms", earliestExpiry(loaded.io()));
        load.put("access-key-id", loaded.io().properties().get("s3.access-key-id"));
        Thread.sleep(interval);
      }
    }
    return loads;
  }

  /**
   * A writer's commit built on a state another writer has since changed: the catalog refuses
   * its first attempt (409), and the client refreshes and retries. `writer` and `other` may
   * reach the catalog by different ways (through icecache, or not).
   */
  static JsonNode conflict(
      Map<String, String> writerProperties, Map<String, String> otherProperties, String table)
      throws Exception {
    ObjectNode outcome = Agent.JSON.createObjectNode();
    try (RESTCatalog writer = Scenario.catalog("writer", writerProperties);
        RESTCatalog other = Scenario.catalog("other", otherProperties)) {
      TableIdentifier id = TableIdentifier.parse(table);
      Table stale = writer.loadTable(id);
      org.apache.iceberg.AppendFiles pending =
          stale.newAppend().appendFile(Scenario.dataFile(stale, 101));
      Scenario.append(other.loadTable(id), 102);
      try {
        pending.commit();
        outcome.put("committed", true);
      } catch (Exception e) {
        outcome.put("committed", false);
        outcome.put("error", e.toString());
      }
      Table after = writer.loadTable(id);
      ArrayNode files = outcome.putArray("files");
      try (org.apache.iceberg.io.CloseableIterable<org.apache.iceberg.FileScanTask> tasks =
          after.newScan().planFiles()) {
        tasks.forEach(task -> files.add(task.file().location()));
      }
    }
    return outcome;
  }

  static JsonNode exists(Map<String, String> properties, String table) throws Exception {
    try (RESTCatalog catalog = Scenario.catalog("exists", properties)) {
      return Agent.JSON.getNodeFactory().booleanNode(catalog.tableExists(TableIdentifier.parse(table)));
    }
  }

  /** The earliest `s3.session-token-expires-at-ms` in the FileIO's properties and credentials. */
  private static long earliestExpiry(FileIO io) {
    long earliest = Long.MAX_VALUE;
    String key = "s3.session-token-expires-at-ms";
    String own = io.properties().get(key);
    if (own != null) {
      earliest = Long.parseLong(own);
    }
    if (io instanceof SupportsStorageCredentials storage) {
      for (StorageCredential credential : storage.credentials()) {
        String expiry = credential.config().get(key);
        if (expiry != null) {
          earliest = Math.min(earliest, Long.parseLong(expiry));
        }
      }
    }
    return earliest;
  }

  private static long snapshotId(Table table) {
    Snapshot current = table.currentSnapshot();
    return current == null ? -1 : current.snapshotId();
  }
}
