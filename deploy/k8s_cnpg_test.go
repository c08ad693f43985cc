package deploy_test

// A rendering that runs its own PostgreSQL as a CloudNativePG Cluster
// (overlays/cloudnative-pg) must keep what the shop's "nothing
// acknowledged is lost" rests on through a failover: a standby to promote,
// a commit acknowledged only once a standby holds it, a promotion only of
// a standby that holds every such commit; pods that connect to the
// primary wherever it is now (the -rw Service, and a connection refused by
// a server that takes no writes), over TLS they check; a migration Job on
// the API's database; and a network that lets each of them through.

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// The operator's pods and namespace as its release manifest installs them.
var (
	cnpgOperatorLabels   = map[string]string{"app.kubernetes.io/name": "cloudnative-pg"}
	cnpgOperatorNSLabels = map[string]string{"kubernetes.io/metadata.name": "cnpg-system"}
)

// cnpgStatusPort is the instance manager's port, which the operator asks.
const cnpgStatusPort = 8000

// pgDefaultMaxConnections is PostgreSQL's max_connections when a Cluster
// sets none (the operator sets none either).
const pgDefaultMaxConnections = 100

// checkCloudNativePG returns what is wrong with the Clusters of a
// rendering and with how the shop's pods use them; nothing when the
// rendering runs no Cluster.
func checkCloudNativePG(o objects) []string {
	if len(o.clusters) == 0 {
		return nil
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	for _, cl := range o.clusters {
		name := cl.Metadata.Name
		if cl.Spec.Instances < 2 {
			bad("Cluster %s: %d instance(s): a failover needs a standby to promote, want at least 2", name, cl.Spec.Instances)
		}
		sync := cl.Spec.PostgreSQL.Synchronous
		if sync == nil || sync.Number < 1 {
			bad("Cluster %s: no synchronous standby: a failover could lose commits the shop acknowledged, want postgresql.synchronous with number at least 1", name)
		} else {
			if sync.Number >= cl.Spec.Instances {
				bad("Cluster %s: synchronous.number %d with %d instances: commits would wait for more standbys than there are", name, sync.Number, cl.Spec.Instances)
			}
			if sync.DataDurability == "preferred" {
				bad("Cluster %s: dataDurability preferred: with its standbys away the primary acknowledges commits that only it holds; want required", name)
			}
			if !sync.FailoverQuorum {
				bad("Cluster %s: no failoverQuorum: losing the primary and the standby that acknowledged would promote one that lacks their commits", name)
			}
		}
		if img := cl.Spec.ImageName; img == "" {
			bad("Cluster %s: no imageName: PostgreSQL's version would be whatever the operator's default is", name)
		} else if _, tag := splitImage(img); tag == "" || tag == "latest" {
			bad("Cluster %s: imageName %q has no version tag", name, img)
		} else if major := leadingInt(tag); major < 15 {
			bad("Cluster %s: imageName %q is PostgreSQL %d; the shop needs 15 or later", name, img, major)
		}

		// The network: the base refuses every ingress no policy allows.
		instance := map[string]string{"cnpg.io/cluster": name}
		ns := cl.Metadata.Namespace
		nsLabels := map[string]string{"kubernetes.io/metadata.name": ns}
		peers := []peer{
			{"its own instances (replication)", instance, ns, nsLabels, cnpgPort},
			{"the operator", cnpgOperatorLabels, "cnpg-system", cnpgOperatorNSLabels, cnpgPort},
			{"the operator", cnpgOperatorLabels, "cnpg-system", cnpgOperatorNSLabels, cnpgStatusPort},
		}
		for _, u := range dbUsers(o) {
			peers = append(peers, peer{u.where, u.pod.Metadata.Labels, ns, nsLabels, cnpgPort})
		}
		for _, p := range peers {
			if !admits(o, instance, ns, p.labels, p.namespace, p.namespaceLabels, p.port) {
				bad("Cluster %s: no NetworkPolicy lets %s reach its pods on port %d", name, p.who, p.port)
			}
		}
	}

	// The database the pods use: the migration Job's must be the API's.
	users := dbUsers(o)
	if len(users) != 2 {
		bad("want Deployment shop-api and Job shop-migrate, found %d of them", len(users))
	}
	var first *url.URL
	var firstWhere string
	for _, u := range users {
		env, _ := containerEnv(o, u.c)
		raw, ok := env["SHOP_DATABASE_URL"]
		if !ok {
			bad("%s: no SHOP_DATABASE_URL that the rendering tells", u.where)
			continue
		}
		db, err := url.Parse(raw)
		if err != nil {
			bad("%s: SHOP_DATABASE_URL: %v", u.where, err)
			continue
		}
		cl := clusterOfRW(o, db.Hostname())
		if cl == nil {
			bad("%s: SHOP_DATABASE_URL names host %s, not the -rw Service of a Cluster: only that one follows the primary through a failover", u.where, db.Hostname())
			continue
		}
		q := db.Query()
		if tsa := q.Get("target_session_attrs"); tsa != "read-write" && tsa != "primary" {
			bad("%s: SHOP_DATABASE_URL has target_session_attrs=%q, want read-write: a connection opened while a switchover moves the Service could land on the demoted primary, whose refusals of writes are no outage to the shop (500, not 503)", u.where, tsa)
		}
		switch mode := q.Get("sslmode"); mode {
		case "require":
		case "verify-ca", "verify-full":
			root := q.Get("sslrootcert")
			secret, key := mountedFrom(u.pod.Spec, u.c, root)
			if secret != cl.Metadata.Name+"-ca" || key != "ca.crt" {
				bad("%s: sslrootcert %q is not key ca.crt of Secret %s-ca mounted in the container (found %q %q)", u.where, root, cl.Metadata.Name, secret, key)
			}
		default:
			bad("%s: SHOP_DATABASE_URL has sslmode=%q; the Cluster serves TLS: want verify-full with its CA, or at least require", u.where, mode)
		}
		if first == nil {
			first, firstWhere = db, u.where
		} else if db.Host != first.Host || db.Path != first.Path {
			bad("%s uses %s%s, %s uses %s%s: the Job must migrate the database the API uses", firstWhere, first.Host, first.Path, u.where, db.Host, db.Path)
		}
	}
	return problems
}

// peer is a client of a Cluster's pods, for the NetworkPolicies.
type peer struct {
	who             string
	labels          map[string]string
	namespace       string
	namespaceLabels map[string]string
	port            int
}

// dbUser is a pod of the shop that connects to PostgreSQL.
type dbUser struct {
	where string
	pod   *podTemplate
	c     *container
}

// dbUsers are the API's and the migration Job's first containers.
func dbUsers(o objects) []dbUser {
	var users []dbUser
	for i := range o.deployments {
		if d := &o.deployments[i]; d.Metadata.Name == "shop-api" && len(d.Spec.Template.Spec.Containers) > 0 {
			users = append(users, dbUser{"Deployment shop-api", &d.Spec.Template, &d.Spec.Template.Spec.Containers[0]})
		}
	}
	for i := range o.jobs {
		if j := &o.jobs[i]; j.Metadata.Name == "shop-migrate" && len(j.Spec.Template.Spec.Containers) > 0 {
			users = append(users, dbUser{"Job shop-migrate", &j.Spec.Template, &j.Spec.Template.Spec.Containers[0]})
		}
	}
	return users
}

// clusterOfRW returns the Cluster whose -rw Service host names (by its
// short name or a longer one in the Cluster's namespace), or nil.
func clusterOfRW(o objects, host string) *cnpgCluster {
	for i := range o.clusters {
		cl := &o.clusters[i]
		rw := cl.Metadata.Name + "-rw"
		for _, h := range []string{rw, rw + "." + cl.Metadata.Namespace, rw + "." + cl.Metadata.Namespace + ".svc", rw + "." + cl.Metadata.Namespace + ".svc.cluster.local"} {
			if host == h {
				return cl
			}
		}
	}
	return nil
}

// clusterMaxConnections is the max_connections a Cluster configures.
func clusterMaxConnections(cl cnpgCluster) (int, error) {
	v, ok := cl.Spec.PostgreSQL.Parameters["max_connections"]
	if !ok {
		return pgDefaultMaxConnections, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("max_connections %q: %v", v, err)
	}
	return n, nil
}

// mountedFrom returns the Secret and its key that the file at file comes
// from in container c of pod, or empty strings.
func mountedFrom(pod podSpec, c *container, file string) (secret, key string) {
	if file == "" {
		return "", ""
	}
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return v.Secret.SecretName, path.Clean(rel)
			}
			for _, it := range v.Secret.Items {
				if path.Clean(it.Path) == path.Clean(rel) {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

// admits reports whether the NetworkPolicies let a pod labelled from, in
// namespace fromNS (labelled fromNSLabels), reach a pod labelled to in
// namespace toNS on port: either no policy isolates the target for
// ingress, or one that selects it has a rule for that peer and port.
func admits(o objects, to map[string]string, toNS string, from map[string]string, fromNS string, fromNSLabels map[string]string, port int) bool {
	isolated := false
	for _, np := range o.netpols {
		if np.Metadata.Namespace != toNS || !matches(np.Spec.PodSelector.MatchLabels, to) {
			continue
		}
		if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, "Ingress") {
			continue
		}
		isolated = true
		for _, in := range np.Spec.Ingress {
			if len(in.Ports) > 0 && !slices.ContainsFunc(in.Ports, func(p policyPort) bool { return p.Port.Str == "" && p.Port.Int == port }) {
				continue
			}
			if len(in.From) == 0 {
				return true
			}
			for _, f := range in.From {
				nsOK := (f.NamespaceSelector == nil && fromNS == np.Metadata.Namespace) ||
					(f.NamespaceSelector != nil && matches(f.NamespaceSelector.MatchLabels, fromNSLabels))
				if nsOK && (f.PodSelector == nil || matches(f.PodSelector.MatchLabels, from)) {
					return true
				}
			}
		}
	}
	return !isolated
}

// matches is a label selector's test: an empty one selects everything.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// leadingInt is the number a string starts with ("18.4-system" is 18).
func leadingInt(s string) int {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(s)
	}
	n, _ := strconv.Atoi(s[:end])
	return n
}

// cnpgMistakes, made in the rendered CloudNativePG overlay, must each be
// found (TestK8s_ChecksCatchMistakes).
var cnpgMistakes = []mistake{
	{"one instance", "a failover needs a standby", func(o *objects) { o.clusters[0].Spec.Instances = 1 }},
	{"asynchronous replication", "no synchronous standby", func(o *objects) { o.clusters[0].Spec.PostgreSQL.Synchronous = nil }},
	{"more synchronous standbys than instances", "more standbys than there are", func(o *objects) { o.clusters[0].Spec.PostgreSQL.Synchronous.Number = 3 }},
	{"durability preferred", "dataDurability preferred", func(o *objects) { o.clusters[0].Spec.PostgreSQL.Synchronous.DataDurability = "preferred" }},
	{"failover without a quorum", "no failoverQuorum", func(o *objects) { o.clusters[0].Spec.PostgreSQL.Synchronous.FailoverQuorum = false }},
	{"an untagged PostgreSQL image", "has no version tag", func(o *objects) { o.clusters[0].Spec.ImageName = "ghcr.io/cloudnative-pg/postgresql" }},
	{"PostgreSQL 14", "the shop needs 15 or later", func(o *objects) { o.clusters[0].Spec.ImageName = "ghcr.io/cloudnative-pg/postgresql:14.18" }},
	{"an autoscaler sized for another max_connections", "but Cluster shop-pg has max_connections 300", func(o *objects) {
		o.clusters[0].Spec.PostgreSQL.Parameters["max_connections"] = "300"
	}},
	{"the read-only Service", "not the -rw Service", func(o *objects) {
		setEnv(api(o), "SHOP_DATABASE_URL", "postgresql://shop:pw@shop-pg-ro.shop:5432/shop?sslmode=require&target_session_attrs=read-write")
	}},
	{"a connection to any server", "target_session_attrs", func(o *objects) {
		editEnv(api(o), "SHOP_DATABASE_URL", "&target_session_attrs=read-write", "")
	}},
	{"TLS not asked for", "sslmode=\"prefer\"", func(o *objects) { editEnv(api(o), "SHOP_DATABASE_URL", "sslmode=verify-full", "sslmode=prefer") }},
	{"the CA not mounted", "sslrootcert", func(o *objects) { api(o).VolumeMounts = nil }},
	{"the migrations on another database", "the Job must migrate the database the API uses", func(o *objects) {
		setEnv(&o.jobs[0].Spec.Template.Spec.Containers[0], "SHOP_DATABASE_URL", "postgresql://shop:pw@shop-pg-rw.shop:5432/other?sslmode=require&target_session_attrs=read-write")
	}},
	{"the URL above the entry it refers to", "which no entry above it defines", func(o *objects) {
		env := api(o).Env
		i := slices.IndexFunc(env, func(e envVar) bool { return e.Name == "CNPG_APP_URI" })
		env[i], env[i+1] = env[i+1], env[i]
	}},
	{"a key the operator does not write", "names key url, which Secret shop-pg-app lacks", func(o *objects) {
		for i := range api(o).Env {
			if e := &api(o).Env[i]; e.Name == "CNPG_APP_URI" {
				e.ValueFrom.SecretKeyRef.Key = "url"
			}
		}
	}},
	{"the API shut out of the database", "lets Deployment shop-api reach its pods on port 5432", func(o *objects) {
		pgPolicy(o).Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] = "shop"
	}},
	{"the Job shut out of the database", "lets Job shop-migrate reach", func(o *objects) {
		pgPolicy(o).Spec.Ingress[0].From[1].PodSelector.MatchLabels["app.kubernetes.io/name"] = "shop"
	}},
	{"no replication between instances", "lets its own instances (replication) reach", func(o *objects) { pgPolicy(o).Spec.Ingress[0].From = pgPolicy(o).Spec.Ingress[0].From[:2] }},
	{"the operator shut out of the status port", "lets the operator reach its pods on port 8000", func(o *objects) { pgPolicy(o).Spec.Ingress[1].Ports = pgPolicy(o).Spec.Ingress[1].Ports[1:] }},
}

// pgPolicy is the overlay's NetworkPolicy of the Cluster's pods.
func pgPolicy(o *objects) *networkPolicy {
	for i := range o.netpols {
		if o.netpols[i].Metadata.Name == "shop-pg" {
			return &o.netpols[i]
		}
	}
	return &networkPolicy{} // none: the mistake's indexing fails the test
}

// editEnv replaces old with new in the value of c's entry name.
func editEnv(c *container, name, old, new string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = strings.Replace(c.Env[i].Value, old, new, 1)
		}
	}
}
