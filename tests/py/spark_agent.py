"""Spark SQL with Iceberg (pyspark 3.5, local[2]) driven from the Rust tests: one Spark session
per test file, commands as JSON lines on stdin, one JSON answer line each on stdout.

usage: spark_agent.py JARS
  JARS           comma-separated jars (the Iceberg Spark runtime and the AWS bundle)

commands:
  {"op": "ready"}                                  answered once the session is up
  {"op": "catalog", "name": "...", "properties": {...}}
                                                   a REST catalog (SparkCatalog) under that name
  {"op": "sql", "query": "..."}                    rows of the query, as lists of strings
  {"op": "concurrent", "queries": ["...", ...]}    runs the queries at once, one thread each,
                                                   and says which succeeded or what they raised
"""
import json
import sys
import threading
import traceback

from pyspark.sql import SparkSession


def session(jars):
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("icecache-tests")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def catalog(spark, name, properties):
    # A catalog is made on its first use: its settings may be given while the session runs.
    spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.type", "rest")
    for key, value in properties.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
    return name


def rows(spark, query):
    result = spark.sql(query)
    return [[None if v is None else str(v) for v in row] for row in result.collect()]


def concurrent(spark, queries):
    outcomes = [None] * len(queries)
    start = threading.Barrier(len(queries))

    def run(i, query):
        start.wait()
        try:
            spark.sql(query).collect()
            outcomes[i] = "ok"
        except Exception as e:  # noqa: BLE001 - the outcome is what is reported
            outcomes[i] = type(e).__name__ + ": " + str(e).splitlines()[0][:300]

    threads = [threading.Thread(target=run, args=(i, q)) for i, q in enumerate(queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def main():
    spark = session(sys.argv[1])
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            command = json.loads(line)
            if command["op"] == "ready":
                result = "ready"
            elif command["op"] == "catalog":
                result = catalog(spark, command["name"], command["properties"])
            elif command["op"] == "sql":
                result = rows(spark, command["query"])
            elif command["op"] == "concurrent":
                result = concurrent(spark, command["queries"])
            else:
                raise ValueError("unknown op " + command["op"])
            answer = {"ok": True, "result": result}
        except Exception:  # noqa: BLE001 - the failure goes back to the test
            answer = {"ok": False, "error": traceback.format_exc()}
        print(json.dumps(answer), file=out, flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
