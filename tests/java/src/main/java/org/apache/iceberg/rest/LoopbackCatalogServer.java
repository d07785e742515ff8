/*
 * Iceberg's reference REST catalog server (the one its REST compatibility kit and the
 * apache/iceberg-rest-fixture image run), bound to loopback on a port the OS picks. It is the
 * upstream's own RESTCatalogServer with two changes a test suite needs: it listens on 127.0.0.1
 * only, and it prints the port it got (a port is never chosen first and bound later). It lives
 * in this package because the adapter it serves through is package-private.
 *
 * Usage: java -cp ... org.apache.iceberg.rest.LoopbackCatalogServer key=value...
 * Every key=value is a catalog property (warehouse, io-impl, s3.endpoint, include-credentials…).
 */
package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.compression.gzip.GzipCompression;
import org.eclipse.jetty.compression.server.CompressionHandler;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class LoopbackCatalogServer {
  private LoopbackCatalogServer() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>();
    for (String arg : args) {
      int equals = arg.indexOf('=');
      if (equals <= 0) {
        throw new IllegalArgumentException("expected key=value, got " + arg);
      }
      properties.put(arg.substring(0, equals), arg.substring(equals + 1));
    }
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    // A file, not `:memory:`: each pooled connection to `:memory:` would see its own database.
    final java.io.File db =
        properties.containsKey(CatalogProperties.URI)
            ? null
            : java.io.File.createTempFile("icecache-reference-catalog", ".db");
    if (db != null) {
      properties.put(CatalogProperties.URI, "jdbc:sqlite:" + db.getAbsolutePath());
    }
    Catalog catalog = CatalogUtil.buildIcebergCatalog("reference", properties, null);
    RESTCatalogServer.CatalogContext context =
        new RESTCatalogServer.CatalogContext(catalog, properties);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTServerCatalogAdapter(context));

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(servlet), "/*");
    CompressionHandler compression = new CompressionHandler();
    compression.putCompression(new GzipCompression());
    handler.insertHandler(compression);

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(0);
    server.addConnector(connector);
    server.setHandler(handler);
    server.start();
    System.out.println("listening on http://127.0.0.1:" + connector.getLocalPort());
    System.out.flush();
    // Stops with the process that started it: its stdin closing is the signal.
    new Thread(
            () -> {
              try {
                while (System.in.read() >= 0) {
                  // Nothing is read from stdin; it only tells when the parent is gone.
                }
              } catch (java.io.IOException ignored) {
                // The parent is gone either way.
              }
              // halt runs no shutdown hook (deleteOnExit neither): the database goes first.
              if (db != null) {
                db.delete();
              }
              Runtime.getRuntime().halt(0);
            })
        .start();
    server.join();
  }
}
