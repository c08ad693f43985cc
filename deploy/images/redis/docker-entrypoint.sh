#!/bin/sh
# Does what the official redis image's entrypoint and build do for a caller:
# arguments starting with "-" (or a .conf file) are for redis-server; the
# server runs as the redis user; protected mode is off unless the caller
# sets it (the official image compiles it off; Debian's default is on, which
# refuses every client from another host when no password is set).
set -e

if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi

if [ "$1" = redis-server ]; then
	case " $* " in
	*" --protected-mode "*) ;;
	*) set -- "$@" --protected-mode no ;;
	esac
	if [ "$(id -u)" = 0 ]; then
		find . \! -user redis -exec chown redis '{}' +
		exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
	fi
fi

exec "$@"
