package deploy_test

// The Kubernetes objects deploy/k8s renders, as far as k8s_test.go reads
// them. They are decoded strictly: a field these types do not know is an
// error, so a misspelt field (readinesProbe, containerPorts) fails the test
// where kubectl kustomize, which knows no schema, renders it silently. Each
// type holds every field the manifests use; a new field needs a line here.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"
)

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// header is what every object has.
type header struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
}

// intOrString is a port or a count given as a number or a name.
type intOrString struct {
	Int int
	Str string
}

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a name", n.Line)
	}
	if i, err := strconv.Atoi(n.Value); err == nil && n.Tag == "!!int" {
		v.Int = i
		return nil
	}
	v.Str = n.Value
	return nil
}

func (v intOrString) String() string {
	if v.Str != "" {
		return v.Str
	}
	return strconv.Itoa(v.Int)
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type podTemplate struct {
	Metadata meta    `yaml:"metadata"`
	Spec     podSpec `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
	AutomountServiceAccountToken  *bool  `yaml:"automountServiceAccountToken"`
	RestartPolicy                 string `yaml:"restartPolicy"`
	SecurityContext               struct {
		RunAsNonRoot   bool `yaml:"runAsNonRoot"`
		RunAsUser      int  `yaml:"runAsUser"`
		RunAsGroup     int  `yaml:"runAsGroup"`
		FSGroup        int  `yaml:"fsGroup"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	TopologySpreadConstraints []struct {
		MaxSkew           int           `yaml:"maxSkew"`
		TopologyKey       string        `yaml:"topologyKey"`
		WhenUnsatisfiable string        `yaml:"whenUnsatisfiable"`
		LabelSelector     labelSelector `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
	Affinity struct {
		PodAntiAffinity struct {
			Preferred []struct {
				Weight          int `yaml:"weight"`
				PodAffinityTerm struct {
					TopologyKey   string        `yaml:"topologyKey"`
					LabelSelector labelSelector `yaml:"labelSelector"`
				} `yaml:"podAffinityTerm"`
			} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
		} `yaml:"podAntiAffinity"`
	} `yaml:"affinity"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name     string    `yaml:"name"`
		EmptyDir *struct{} `yaml:"emptyDir"`
		Secret   *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env       []envVar `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		ResourceFieldRef *struct {
			ContainerName string `yaml:"containerName"`
			Resource      string `yaml:"resource"`
		} `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
	PeriodSeconds       int `yaml:"periodSeconds"`
	TimeoutSeconds      int `yaml:"timeoutSeconds"`
	FailureThreshold    int `yaml:"failureThreshold"`
}

type deployment struct {
	header `yaml:",inline"`
	Spec   struct {
		Replicas             int           `yaml:"replicas"`
		RevisionHistoryLimit int           `yaml:"revisionHistoryLimit"`
		Selector             labelSelector `yaml:"selector"`
		Strategy             struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable intOrString `yaml:"maxUnavailable"`
				MaxSurge       intOrString `yaml:"maxSurge"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

type statefulSet struct {
	header `yaml:",inline"`
	Spec   struct {
		ServiceName          string        `yaml:"serviceName"`
		Replicas             int           `yaml:"replicas"`
		Selector             labelSelector `yaml:"selector"`
		Template             podTemplate   `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				AccessModes []string `yaml:"accessModes"`
				Resources   struct {
					Requests map[string]string `yaml:"requests"`
				} `yaml:"resources"`
			} `yaml:"spec"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type job struct {
	header `yaml:",inline"`
	Spec   struct {
		BackoffLimit            int         `yaml:"backoffLimit"`
		ActiveDeadlineSeconds   int         `yaml:"activeDeadlineSeconds"`
		TTLSecondsAfterFinished int         `yaml:"ttlSecondsAfterFinished"`
		Template                podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

type service struct {
	header `yaml:",inline"`
	Spec   struct {
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string      `yaml:"name"`
	Port       int         `yaml:"port"`
	TargetPort intOrString `yaml:"targetPort"`
}

type podDisruptionBudget struct {
	header `yaml:",inline"`
	Spec   struct {
		MaxUnavailable *intOrString  `yaml:"maxUnavailable"`
		MinAvailable   *intOrString  `yaml:"minAvailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type horizontalPodAutoscaler struct {
	header `yaml:",inline"`
	Spec   struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas int `yaml:"minReplicas"`
		MaxReplicas int `yaml:"maxReplicas"`
		Metrics     []struct {
			Type     string `yaml:"type"`
			Resource struct {
				Name   string `yaml:"name"`
				Target struct {
					Type               string `yaml:"type"`
					AverageUtilization int    `yaml:"averageUtilization"`
				} `yaml:"target"`
			} `yaml:"resource"`
		} `yaml:"metrics"`
		Behavior struct {
			ScaleDown struct {
				StabilizationWindowSeconds int `yaml:"stabilizationWindowSeconds"`
			} `yaml:"scaleDown"`
		} `yaml:"behavior"`
	} `yaml:"spec"`
}

type networkPolicy struct {
	header `yaml:",inline"`
	Spec   struct {
		PodSelector labelSelector `yaml:"podSelector"`
		PolicyTypes []string      `yaml:"policyTypes"`
		Ingress     []struct {
			From []struct {
				NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
				PodSelector       *labelSelector `yaml:"podSelector"`
			} `yaml:"from"`
			Ports []policyPort `yaml:"ports"`
		} `yaml:"ingress"`
	} `yaml:"spec"`
}

type policyPort struct {
	Port intOrString `yaml:"port"`
}

type secret struct {
	header `yaml:",inline"`
	Type   string            `yaml:"type"`
	Data   map[string]string `yaml:"data"`
}

type namespace struct {
	header `yaml:",inline"`
}

type ingress struct {
	header `yaml:",inline"`
	Spec   struct {
		IngressClassName string `yaml:"ingressClassName"`
		Rules            []struct {
			Host string `yaml:"host"`
			HTTP struct {
				Paths []struct {
					Path     string `yaml:"path"`
					PathType string `yaml:"pathType"`
					Backend  struct {
						Service struct {
							Name string `yaml:"name"`
							Port struct {
								Name   string `yaml:"name"`
								Number int    `yaml:"number"`
							} `yaml:"port"`
						} `yaml:"service"`
					} `yaml:"backend"`
				} `yaml:"paths"`
			} `yaml:"http"`
		} `yaml:"rules"`
	} `yaml:"spec"`
}

// cnpgCluster is a CloudNativePG Cluster (postgresql.cnpg.io/v1, as of
// operator 1.30), only the fields the overlay uses: a field the operator
// knows and this type does not fails the decoding, so a check never
// passes on a setting it did not read.
type cnpgCluster struct {
	header `yaml:",inline"`
	Spec   struct {
		Instances  int    `yaml:"instances"`
		ImageName  string `yaml:"imageName"`
		PostgreSQL struct {
			Parameters  map[string]string `yaml:"parameters"`
			Synchronous *struct {
				Method         string `yaml:"method"`
				Number         int    `yaml:"number"`
				DataDurability string `yaml:"dataDurability"`
				FailoverQuorum bool   `yaml:"failoverQuorum"`
			} `yaml:"synchronous"`
		} `yaml:"postgresql"`
		Bootstrap struct {
			InitDB struct {
				Database string `yaml:"database"`
				Owner    string `yaml:"owner"`
			} `yaml:"initdb"`
		} `yaml:"bootstrap"`
		Storage struct {
			Size string `yaml:"size"`
		} `yaml:"storage"`
	} `yaml:"spec"`
}

// objects is one rendering, by kind.
type objects struct {
	deployments  []deployment
	statefulSets []statefulSet
	jobs         []job
	services     []service
	pdbs         []podDisruptionBudget
	hpas         []horizontalPodAutoscaler
	netpols      []networkPolicy
	secrets      []secret
	namespaces   []namespace
	ingresses    []ingress
	clusters     []cnpgCluster
}

// decodeObjects decodes every document of a rendering strictly into its
// kind's type; an unknown kind, API version or field is an error.
func decodeObjects(rendered []byte) (objects, error) {
	var objs objects
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return objs, fmt.Errorf("document %d: %w", i, err)
		}
		raw, err := yaml.Marshal(&doc)
		if err != nil {
			return objs, err
		}
		var h header
		if err := doc.Decode(&h); err != nil {
			return objs, fmt.Errorf("document %d: %w", i, err)
		}
		where := fmt.Sprintf("%s %s", h.Kind, h.Metadata.Name)
		strict := func(v any) error {
			d := yaml.NewDecoder(bytes.NewReader(raw))
			d.KnownFields(true)
			if err := d.Decode(v); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			return nil
		}
		var apiVersion string
		switch h.Kind {
		case "Deployment":
			apiVersion = "apps/v1"
			var o deployment
			err = strict(&o)
			objs.deployments = append(objs.deployments, o)
		case "StatefulSet":
			apiVersion = "apps/v1"
			var o statefulSet
			err = strict(&o)
			objs.statefulSets = append(objs.statefulSets, o)
		case "Job":
			apiVersion = "batch/v1"
			var o job
			err = strict(&o)
			objs.jobs = append(objs.jobs, o)
		case "Service":
			apiVersion = "v1"
			var o service
			err = strict(&o)
			objs.services = append(objs.services, o)
		case "PodDisruptionBudget":
			apiVersion = "policy/v1"
			var o podDisruptionBudget
			err = strict(&o)
			objs.pdbs = append(objs.pdbs, o)
		case "HorizontalPodAutoscaler":
			apiVersion = "autoscaling/v2"
			var o horizontalPodAutoscaler
			err = strict(&o)
			objs.hpas = append(objs.hpas, o)
		case "NetworkPolicy":
			apiVersion = "networking.k8s.io/v1"
			var o networkPolicy
			err = strict(&o)
			objs.netpols = append(objs.netpols, o)
		case "Secret":
			apiVersion = "v1"
			var o secret
			err = strict(&o)
			objs.secrets = append(objs.secrets, o)
		case "Namespace":
			apiVersion = "v1"
			var o namespace
			err = strict(&o)
			objs.namespaces = append(objs.namespaces, o)
		case "Ingress":
			apiVersion = "networking.k8s.io/v1"
			var o ingress
			err = strict(&o)
			objs.ingresses = append(objs.ingresses, o)
		case "Cluster":
			apiVersion = "postgresql.cnpg.io/v1"
			var o cnpgCluster
			err = strict(&o)
			objs.clusters = append(objs.clusters, o)
		default:
			return objs, fmt.Errorf("%s: a kind this test does not know; add its type to k8s_objects_test.go", where)
		}
		if err != nil {
			return objs, err
		}
		if h.APIVersion != apiVersion {
			return objs, fmt.Errorf("%s: apiVersion %q, want %q", where, h.APIVersion, apiVersion)
		}
	}
}
