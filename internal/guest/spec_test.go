package guest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/config"
)

func TestSpecForPorts(t *testing.T) {
	cases := []struct {
		name string
		cfg  config.Config
		want []int
	}{
		{"jail port added", config.Config{Egress: "closed", Manager: config.Manager{AllowPorts: []int{8080}}, Broker: config.Broker{JailPort: 7443, AdminPort: 7444}}, []int{8080, 7443}},
		{"no broker port configured", config.Config{Manager: config.Manager{AllowPorts: []int{8080}}}, []int{8080}},
		{"admin port never added", config.Config{Broker: config.Broker{JailPort: 7443, AdminPort: 7444}}, []int{7443}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SpecFor(&c.cfg, "host.example.internal").Ports
			if d := cmp.Diff(c.want, got); d != "" {
				t.Fatalf("ports (-want +got):\n%s", d)
			}
		})
	}
}
