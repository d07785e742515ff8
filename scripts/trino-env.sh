#!/usr/bin/env bash
# Installs Trino for the suite (tests/clients/trino.rs): the server's core and its Iceberg connector,
# both from Maven Central (io.trino, pinned below), unpacked once into ~/.cache/icecache. Trino
# runs on the Temurin 25 JDK the machines carry (ICECACHE_TRINO_JAVA_HOME overrides it).
set -euo pipefail
version=476
cache="${ICECACHE_CACHE:-$HOME/.cache/icecache}"
home="$cache/trino-$version/trino-server-core-$version"
stamp="$cache/trino-$version/.installed"
if [ ! -f "$stamp" ]; then
  downloads="$cache/downloads"
  mkdir -p "$downloads"
  central=https://repo1.maven.org/maven2/io/trino
  for artifact in "trino-server-core/$version/trino-server-core-$version.tar.gz" \
                  "trino-iceberg/$version/trino-iceberg-$version.zip"; do
    file="$downloads/$(basename "$artifact")"
    if [ ! -s "$file" ]; then
      curl -sSfL -o "$file.part" "$central/$artifact"
      mv "$file.part" "$file"
    fi
  done
  rm -rf "$cache/trino-$version"
  mkdir -p "$cache/trino-$version"
  tar xzf "$downloads/trino-server-core-$version.tar.gz" -C "$cache/trino-$version"
  unzip -q "$downloads/trino-iceberg-$version.zip" -d "$home/plugin"
  mv "$home/plugin/trino-iceberg-$version" "$home/plugin/iceberg"
  touch "$stamp"
fi
echo "$home"
