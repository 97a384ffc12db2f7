package devcluster

import (
	"errors"
	"slices"
	"testing"
)

func TestPorts(t *testing.T) {
	cases := []struct {
		name       string
		agents     int
		offset     int
		withConsul bool
		wantErr    bool
		// some ports the plan must hold, when it is accepted
		has []int
	}{
		{"three agents", 3, 0, true, false, []int{18500, 18300, 18301, 18302, 7070, 7072, 7171, 7173, 9092, 9094}},
		{"one agent", 1, 0, true, false, []int{7070, 7171, 9092}},
		{"five agents shifted", 5, 1000, true, false, []int{19500, 8074, 8175, 10096}},
		{"most agents", MaxAgents, 0, true, false, []int{7170, 7271, 9192}},
		{"external Consul", 3, 0, false, false, []int{7070}},
		{"no agents", 0, 0, true, true, nil},
		{"negative", -1, 0, true, true, nil},
		{"client ports reach the peer ports", MaxAgents + 1, 0, true, true, nil},
		{"offset past the port range", 3, 47036, true, true, nil},
		{"offset below the port range", 3, -7070, true, true, nil},
		{"consul's ports past the range only", 3, 47100, false, false, []int{7070 + 47100}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ports, err := Ports(c.agents, c.offset, c.withConsul)
			if c.wantErr {
				if !errors.Is(err, ErrBadAgents) {
					t.Fatalf("Ports(%d, %d) = %v, %v; want ErrBadAgents", c.agents, c.offset, ports, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := 3 * c.agents
			if c.withConsul {
				want += 4
			}
			if len(ports) != want {
				t.Errorf("%d ports, want %d", len(ports), want)
			}
			sorted := slices.Sorted(slices.Values(ports))
			if len(slices.Compact(sorted)) != len(ports) {
				t.Errorf("duplicate ports in %v", ports)
			}
			for _, p := range c.has {
				if !slices.Contains(ports, p) {
					t.Errorf("port %d missing from %v", p, ports)
				}
			}
		})
	}
}
