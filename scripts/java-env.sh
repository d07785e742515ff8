#!/usr/bin/env bash
# Builds the JVM side of the suite (tests/java: the Iceberg Java client driven by the tests,
# Iceberg's reference REST catalog server, and the jars Spark loads; tests/kafka: an Apache
# Kafka broker), every version pinned in tests/java/pom.xml and tests/kafka/pom.xml. Maven keeps what it downloads in ~/.m2; a build with nothing changed
# takes seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  echo "java-env.sh: the suite needs a JDK 17 and Maven (java, mvn on PATH)" >&2
  exit 1
fi
mvn -q -B -f "$root/tests/java/pom.xml" package
mvn -q -B -f "$root/tests/kafka/pom.xml" package
