# Sourced by scripts/demo and scripts/test (not run): `use_venv SPEC` leaves the active virtual
# environment, else .venv in the checkout (created when missing), active, with SPEC (`.`:
# gitreg; `.[test]`: with its test extra) installed at the versions requirements.lock pins.
# Run from the checkout's root.

say() { printf 'scripts/%s: %s\n' "$(basename "$0")" "$*" >&2; }

use_venv() {
  command -v git >/dev/null || { say "git is missing: gitreg serves modules from Git (apt-get install git)"; exit 2; }
  if [ -z "${VIRTUAL_ENV:-}" ]; then
    local python
    python=$(command -v python3 || true)
    [ -n "$python" ] || { say "python3 is missing (Python >= 3.11 with venv)"; exit 2; }
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { say "gitreg needs Python >= 3.11; $("$python" --version) found"; exit 2; }
    if [ ! -x .venv/bin/python ]; then
      say "creating .venv"
      "$python" -m venv .venv || { say "python3 -m venv failed (Debian/Ubuntu: sudo apt install python3-venv)"; exit 2; }
    fi
    # shellcheck disable=SC1091  # made just above
    . .venv/bin/activate
  fi
  say "installing $1 at the locked versions into $VIRTUAL_ENV"
  python -m pip install --quiet -c requirements.lock "$1"
}
