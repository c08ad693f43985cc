package deploy_test

// A container's environment as the kubelet would give it, as far as the
// rendering tells: literal values, the values of a rendered Secret, the
// values a CloudNativePG Cluster of the rendering has its operator write
// into its Secrets, and $(VAR) references to the entries above expanded.

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
)

// cnpgPort is the port of every CloudNativePG instance and Service.
const cnpgPort = 5432

// generatedPassword stands in for the password the operator generates.
const generatedPassword = "generated-by-the-operator"

// varRef is a Kubernetes $(VAR) reference in an env value.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// containerEnv returns c's environment and the $(VAR) references that
// Kubernetes would leave as written: a name no entry above defines
// (Kubernetes expands only those, in order). A value from a Secret that
// neither the rendering nor an operator provides is absent (checkK8s
// reports the reference); the configuration's defaults stand in for it.
func containerEnv(o objects, c *container) (map[string]string, []string) {
	env := map[string]string{}
	var unexpanded []string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			if ref := e.ValueFrom.SecretKeyRef; ref != nil {
				if v, ok := secretData(o, ref.Name)[ref.Key]; ok {
					env[e.Name] = v
				}
			}
			continue
		}
		env[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			if v, ok := env[name]; ok {
				return v
			}
			unexpanded = append(unexpanded, fmt.Sprintf("container %s: %s refers to $(%s), which no entry above it defines: Kubernetes passes it as written", c.Name, e.Name, name))
			return ref
		})
	}
	return env, unexpanded
}

// secretData returns the keys and values of the Secret a pod names: a
// rendered one (the generator's name, before its hash suffix), or one
// that the operator writes for a Cluster of the rendering; nil if
// neither.
func secretData(o objects, name string) map[string]string {
	if s := findSecret(o, name); s != nil {
		data := map[string]string{}
		for k, v := range s.Data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				b = []byte(v)
			}
			data[k] = string(b)
		}
		return data
	}
	for _, cl := range o.clusters {
		if data, ok := operatorSecrets(cl)[name]; ok {
			return data
		}
	}
	return nil
}

// operatorSecrets are the Secrets CloudNativePG 1.30 writes for a Cluster
// that it bootstraps with initdb, by name, with the keys it gives them
// (pkg/specs/secrets.go, CreateSecret; docs/src/applications.md, "Secrets";
// docs/src/certificates.md, "Server CA secret"): the owner's credentials
// (the URIs name the -rw Service, and carry no query string) and the CA
// that signed the server's certificate.
func operatorSecrets(cl cnpgCluster) map[string]map[string]string {
	db := cl.Spec.Bootstrap.InitDB.Database
	if db == "" {
		db = "app" // the operator's default
	}
	owner := cl.Spec.Bootstrap.InitDB.Owner
	if owner == "" {
		owner = db
	}
	rw := cl.Metadata.Name + "-rw"
	port := strconv.Itoa(cnpgPort)
	uri := func(host string) string {
		u := url.URL{Scheme: "postgresql", User: url.UserPassword(owner, generatedPassword), Host: host + ":" + port, Path: db}
		return u.String()
	}
	jdbc := func(host string) string {
		u := url.URL{Scheme: "jdbc:postgresql", Host: host + ":" + port, Path: db}
		u.RawQuery = url.Values{"user": {owner}, "password": {generatedPassword}}.Encode()
		return u.String()
	}
	ns := rw + "." + cl.Metadata.Namespace
	fqdn := ns + ".svc.cluster.local"
	return map[string]map[string]string{
		cl.Metadata.Name + "-app": {
			"username": owner, "user": owner, "password": generatedPassword,
			"dbname": db, "host": rw, "port": port,
			"pgpass":   fmt.Sprintf("%s:%s:%s:%s:%s\n", rw, port, db, owner, generatedPassword),
			"uri":      uri(ns),
			"jdbc-uri": jdbc(ns),
			"fqdn-uri": uri(fqdn), "fqdn-jdbc-uri": jdbc(fqdn),
		},
		cl.Metadata.Name + "-ca": {"ca.crt": "", "ca.key": ""},
	}
}
