/*
 * What a Spark or Flink job does to a catalog through the Java client, step by step: namespaces,
 * tables, appends, schema evolution, properties, rename, views, drops. Every write goes through
 * one client (`via`, pointed at icecache); after each, the same reads are made through both
 * clients (`via` and `direct`, pointed at the catalog itself) and must see the same thing.
 */
package dev.icecache.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.view.BaseView;
import org.apache.iceberg.view.ViewMetadataParser;

final class Scenario {
  private final RESTCatalog via;
  private final RESTCatalog direct;
  private final ArrayNode steps = Agent.JSON.createArrayNode();
  private boolean failed;

  private Scenario(RESTCatalog via, RESTCatalog direct) {
    this.via = via;
    this.direct = direct;
  }

  interface Write {
    void run() throws Exception;
  }

  interface Read {
    Object of(RESTCatalog catalog) throws Exception;
  }

  static RESTCatalog catalog(String name, Map<String, String> properties) {
    RESTCatalog catalog = new RESTCatalog();
    catalog.initialize(name, properties);
    return catalog;
  }

  static JsonNode run(Map<String, String> via, Map<String, String> direct, String ns)
      throws Exception {
    try (RESTCatalog through = catalog("via", via);
        RESTCatalog around = catalog("direct", direct)) {
      Scenario s = new Scenario(through, around);
      s.play(Namespace.of(ns));
      ObjectNode report = Agent.JSON.createObjectNode();
      report.set("steps", s.steps);
      report.put("failed", s.failed);
      return report;
    }
  }

  private void play(Namespace namespace) {
    Schema schema =
        new Schema(
            Types.NestedField.required(1, "id", Types.LongType.get()),
            Types.NestedField.optional(2, "data", Types.StringType.get()));
    TableIdentifier events = TableIdentifier.of(namespace, "events");
    TableIdentifier renamed = TableIdentifier.of(namespace, "events_renamed");
    TableIdentifier view = TableIdentifier.of(namespace, "recent");

    write("create namespace", () -> via.createNamespace(namespace, new java.util.HashMap<>(Map.of("owner", "icecache"))));
    read("namespace exists", c -> c.namespaceExists(namespace));
    read("namespace listed", c -> c.listNamespaces().contains(namespace));
    write("create table", () -> via.createTable(events, schema, PartitionSpec.unpartitioned()));
    table("after create", events);
    write("append", () -> append(via.loadTable(events), 1));
    table("after append", events);
    write("append again", () -> append(via.loadTable(events), 2));
    table("after a second append", events);
    read("files planned", c -> files(c.loadTable(events)));
    write(
        "evolve schema",
        () -> via.loadTable(events).updateSchema().addColumn("extra", Types.IntegerType.get()).commit());
    table("after schema evolution", events);
    write(
        "set a property",
        () -> via.loadTable(events).updateProperties().set("icecache.test", "yes").commit());
    table("after a property", events);
    read("tables", c -> sorted(c.listTables(namespace)));
    write("rename", () -> via.renameTable(events, renamed));
    read("tables after rename", c -> sorted(c.listTables(namespace)));
    read("old name exists", c -> c.tableExists(events));
    read("old name loads", c -> failure(() -> c.loadTable(events)));
    table("renamed", renamed);
    write(
        "create view",
        () ->
            via.buildView(view)
                .withSchema(schema)
                .withDefaultNamespace(namespace)
                .withQuery("spark", "SELECT * FROM events_renamed")
                .create());
    view("view", view);
    write(
        "replace view",
        () ->
            via.buildView(view)
                .withSchema(schema)
                .withDefaultNamespace(namespace)
                .withQuery("spark", "SELECT id, data FROM events_renamed WHERE id > 0")
                .replace());
    view("replaced view", view);
    read("views", c -> sorted(c.listViews(namespace)));
    write("drop view", () -> via.dropView(view));
    read("view exists after drop", c -> c.viewExists(view));
    write("drop table", () -> via.dropTable(renamed, false));
    read("table exists after drop", c -> c.tableExists(renamed));
    read("dropped table loads", c -> failure(() -> c.loadTable(renamed)));
    write("drop namespace", () -> via.dropNamespace(namespace));
    read("namespace exists after drop", c -> c.namespaceExists(namespace));
  }

  private void write(String name, Write write) {
    if (failed) {
      return;
    }
    ObjectNode step = steps.addObject();
    step.put("step", name);
    step.put("kind", "write");
    try {
      write.run();
      step.put("ok", true);
    } catch (Exception e) {
      failed = true;
      step.put("ok", false);
      java.io.StringWriter trace = new java.io.StringWriter();
      e.printStackTrace(new java.io.PrintWriter(trace));
      step.put("error", trace.toString());
    }
  }

  private void read(String name, Read read) {
    if (failed) {
      return;
    }
    ObjectNode step = steps.addObject();
    step.put("step", name);
    step.put("kind", "read");
    String seenVia = outcome(via, read);
    String seenDirect = outcome(direct, read);
    boolean same = Objects.equals(seenVia, seenDirect);
    step.put("same", same);
    step.put("via", abbreviated(seenVia, same));
    step.put("direct", abbreviated(seenDirect, same));
  }

  private void table(String name, TableIdentifier id) {
    read(
        "table " + name,
        c -> TableMetadataParser.toJson(((BaseTable) c.loadTable(id)).operations().current()));
  }

  private void view(String name, TableIdentifier id) {
    read(
        "view " + name,
        c -> ViewMetadataParser.toJson(((BaseView) c.loadView(id)).operations().current()));
  }

  private static String outcome(RESTCatalog catalog, Read read) {
    try {
      return String.valueOf(read.of(catalog));
    } catch (Exception e) {
      return "threw " + e.getClass().getSimpleName();
    }
  }

  private static String abbreviated(String seen, boolean same) {
    return same && seen.length() > 200 ? seen.substring(0, 200) + "…" : seen;
  }

  private static String failure(Write load) {
    try {
      load.run();
      return "loaded";
    } catch (Exception e) {
      return e.getClass().getSimpleName();
    }
  }

  private static List<String> sorted(List<TableIdentifier> ids) {
    List<String> names = new ArrayList<>();
    ids.forEach(id -> names.add(id.toString()));
    names.sort(null);
    return names;
  }

  static void append(Table table, int n) {
    table.newAppend().appendFile(dataFile(table, n)).commit();
  }

  static DataFile dataFile(Table table, int n) {
    return DataFiles.builder(table.spec())
        .withPath(table.location() + "/data/file-" + n + ".parquet")
        .withFormat(FileFormat.PARQUET)
        .withFileSizeInBytes(1024L * n)
        .withRecordCount(10L * n)
        .build();
  }

  private static List<String> files(Table table) throws Exception {
    List<String> paths = new ArrayList<>();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
      tasks.forEach(task -> paths.add(task.file().location()));
    }
    paths.sort(null);
    return paths;
  }
}
