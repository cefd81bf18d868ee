#!/usr/bin/env bash
# Build a real, tagged Git repository holding examples/hello, for the quickstart.
# Usage: examples/demo-repo.sh [DIR]   (default /tmp/gitreg-demo; the repository is DIR/hello.git)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/gitreg-demo}
if [ -e "$dir" ] && [ ! -f "$dir/.gitreg-demo" ]; then
  echo "demo-repo.sh: $dir exists and is not a gitreg demo directory; choose another" >&2
  exit 2
fi
rm -rf "$dir"
mkdir -p "$dir/work"
touch "$dir/.gitreg-demo"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() { git -C "$dir/work" -c user.name=gitreg-demo -c user.email=demo@gitreg.invalid "$@"; }
g init -q -b main
cp "$here/hello/README.md" "$dir/work/"
for v in 1.0.0 1.1.0 1.2.0 2.0.0-rc.1; do
  sed "s/hello, /hello (v$v), /" "$here/hello/main.tf" > "$dir/work/main.tf"
  g add -A
  g commit -q -m "hello $v"
  g tag -a -m "hello $v" "v$v"
done
git clone -q --bare "$dir/work" "$dir/hello.git"
echo "demo repository: file://$dir/hello.git (tags: $(git -C "$dir/hello.git" tag | paste -sd' ' -))"
