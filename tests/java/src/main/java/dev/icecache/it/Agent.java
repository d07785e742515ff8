/*
 * The Iceberg Java client (RESTCatalog, the RESTSessionCatalog that Spark, Trino and Flink use),
 * driven by the Rust tests: one JVM per test file reads one JSON command per line on stdin and
 * answers one JSON line on stdout. It exits when stdin closes (the test process is gone).
 *
 * Every command names the catalogs it uses by their client properties, so the same code runs
 * against a catalog directly and through icecache.
 */
package dev.icecache.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public final class Agent {
  static final ObjectMapper JSON = new ObjectMapper();

  private Agent() {}

  public static void main(String[] args) throws Exception {
    // What the client libraries log goes to stderr; stdout carries only answers.
    PrintStream answers = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    BufferedReader commands =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = commands.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      ObjectNode answer = JSON.createObjectNode();
      try {
        JsonNode command = JSON.readTree(line);
        answer.set("result", run(command));
        answer.put("ok", true);
      } catch (Throwable failure) {
        StringWriter trace = new StringWriter();
        failure.printStackTrace(new PrintWriter(trace));
        answer.put("ok", false);
        answer.put("error", trace.toString());
      }
      answers.println(JSON.writeValueAsString(answer));
    }
    Runtime.getRuntime().halt(0);
  }

  private static JsonNode run(JsonNode command) throws Exception {
    String op = command.path("op").asText();
    return switch (op) {
      case "scenario" -> Scenario.run(
          properties(command.get("via")),
          properties(command.get("direct")),
          command.get("namespace").asText());
      case "loads" -> Loads.repeat(
          properties(command.get("catalog")),
          command.get("table").asText(),
          command.get("times").asInt());
      case "commit-seen" -> Loads.commitSeen(
          properties(command.get("catalog")), command.get("table").asText());
      case "credentials" -> Loads.credentialsOverTime(
          properties(command.get("catalog")),
          command.get("table").asText(),
          command.get("times").asInt(),
          command.get("interval-ms").asLong());
      case "conflict" -> Loads.conflict(
          properties(command.get("writer")),
          properties(command.get("other")),
          command.get("table").asText());
      case "exists" -> Loads.exists(
          properties(command.get("catalog")), command.get("table").asText());
      default -> throw new IllegalArgumentException("unknown op " + op);
    };
  }

  static Map<String, String> properties(JsonNode node) {
    Map<String, String> properties = new HashMap<>();
    node.fields().forEachRemaining(e -> properties.put(e.getKey(), e.getValue().asText()));
    return properties;
  }

  static ArrayNode array(List<String> items) {
    ArrayNode array = JSON.createArrayNode();
    new ArrayList<>(items).stream().sorted().forEach(array::add);
    return array;
  }
}
