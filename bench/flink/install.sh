#!/usr/bin/env bash
# Installs Apache Flink (PyFlink 2.3.0 from PyPI, with its jars) into its own virtual
# environment, idempotently, and prints the environment's python. Needs PyPI and Java 11 or
# 17, which it installs with apt when missing and run as root.
# usage: bench/flink/install.sh [VENV_DIR]   (default: target/tools/flink/venv)
#        bench/flink/install.sh --jdk         (a JDK's javac, for weir-backpressure-bench's
#                                              Java throttle; installed with apt when missing)
set -euo pipefail
if [ "${1:-}" = "--jdk" ]; then
  if ! command -v javac >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing a JDK (openjdk-17-jdk-headless) for the Java throttle" >&2
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >&2
    else
      echo "install.sh: javac not found (apt-get install openjdk-17-jdk-headless)" >&2
      exit 1
    fi
  fi
  command -v javac
  exit 0
fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-$root/target/tools/flink/venv}"
version="2.3.0"
if ! command -v java >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Java 17 (openjdk-17-jre-headless) for Flink" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >&2
  else
    echo "install.sh: java not found; Flink $version needs Java 11 or 17 (apt-get install openjdk-17-jre-headless)" >&2
    exit 1
  fi
fi
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('apache-flink') != '$version')" 2>/dev/null; then
  echo "$venv/bin/python"
  exit 0
fi
echo "installing apache-flink==$version into $venv (about 850 MB, a minute or two)" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check "apache-flink==$version" >&2
echo "$venv/bin/python"
