package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// handedOut remembers every port this process has given away, so two tests
// running in parallel never receive the same port even though each probe
// listener is closed before the child process binds the port.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// maxPortProbes bounds the search for one port; the kernel hands out
// thousands of distinct ephemeral ports, so hitting it means something is
// badly wrong with the machine.
const maxPortProbes = 1000

// Take returns n distinct loopback ports that were free for both TCP and
// UDP (Consul's Serf uses both) when probed and that no other caller in this
// process has received.
func Take(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	ports := make([]int, 0, n)
	for probes := 0; len(ports) < n; probes++ {
		if probes == maxPortProbes {
			return nil, fmt.Errorf("freeport: no free loopback port after %d probes", maxPortProbes)
		}
		port := probePort()
		if port == 0 || handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

// Ports are drawn below Linux's ephemeral range (32768-60999 by default):
// a port the kernel hands out for ":0" may be taken, between the probe and
// the server's bind, by the local end of any outgoing connection on the
// machine, which is how parallel test processes used to collide. Each test
// process draws from its own slice of the range, picked by its PID, so two
// processes rarely even try the same port.
const (
	portRangeStart = 10000
	portRangeEnd   = 32000
	portSlices     = 11
)

var portRand = rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))

// probePort picks a port in this process's slice of the range and checks
// that TCP and UDP can both bind it; it returns 0 when either is taken.
func probePort() int {
	width := (portRangeEnd - portRangeStart) / portSlices
	base := portRangeStart + (os.Getpid()%portSlices)*width
	port := base + portRand.IntN(width)
	tcp, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return 0
	}
	udp, udpErr := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if udpErr == nil {
		udp.Close()
	}
	tcp.Close()
	if udpErr != nil {
		return 0
	}
	return port
}
