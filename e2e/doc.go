// Package e2e is the compose smoke test: it brings the whole stack of
// docker-compose.yml up (PostgreSQL, three Redis nodes, the migration job,
// the payment gateway, the mail provider, two API replicas, the load
// balancer), drives a scenario through the balancer, stops one API replica
// and one Redis node in the middle of it, checks through the API, the
// gateway's audit and the mailer's that nothing was lost or applied twice,
// and tears the stack down.
//
// The tests are behind the e2e build tag, so `make test` does not run them:
//
//	make e2e    # builds the shop image, then go test -tags e2e ./e2e/
//
// Settings: SHOP_E2E_PORT (host port of the balancer, default 18080;
// SHOP_E2E_GATEWAY_PORT and SHOP_E2E_MAILER_PORT, 18081 and 18082),
// SHOP_E2E_COMPOSE (the compose command; default `docker compose` when it
// exists, else `docker-compose`), and the image variables of
// docker-compose.yml (SHOP_IMAGE, POSTGRES_IMAGE, ...).
package e2e
