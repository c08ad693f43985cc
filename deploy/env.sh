# Sourced by deploy/up.sh, failover.sh and failover-demo.sh, from the
# repository's root.

# load_env exports the KEY=value lines of file whose key the shell has not
# set (as compose and the Makefile read .env: the shell wins), or every
# line with "override".
load_env() {
  local file=$1 mode=${2:-} line key
  [ -f "$file" ] || return 0
  while IFS= read -r line; do
    [[ "$line" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*$ ]] || continue
    key=${line%%=*}
    if [ "$mode" = override ] || [ -z "${!key+set}" ]; then
      export "$line"
    fi
  done <"$file"
}

# use_ha adds the ha profile, so compose knows the standby, and exports
# deploy/ha.env's settings where the shell has none.
use_ha() {
  export COMPOSE_PROFILES="${COMPOSE_PROFILES:+$COMPOSE_PROFILES,}ha"
  load_env deploy/ha.env
}
