package testcluster

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketInode finds, in /proc/net/tcp, the loopback socket whose local port
// is local and remote port is remote (the dialing side of a connection a
// proxy accepted), and returns its inode.
//
// /proc/net/tcp lists one socket a line; the fields used are:
//
//	sl  local_address rem_address   st ... uid  timeout inode
//	 7: 0100007F:A1C2 0100007F:9C40 01 ... 0    0       418751
//	    └ IPv4 hex    └ port hex                        └ field 9
func socketInode(local, remote int) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", local)
	wantRemote := fmt.Sprintf(":%04X", remote)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 10 {
			continue
		}
		if strings.HasSuffix(fields[1], want) && strings.HasSuffix(fields[2], wantRemote) {
			return fields[9], nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("testcluster: no socket from port %d to %d", local, remote)
}

// ownsSocket reports whether process pid has the socket inode open.
func ownsSocket(pid int, inode string) bool {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}

// identifyAgent names the agent whose process dialed the connection from
// remote to the proxy at local, or "" when none did (a test's client).
func (c *Cluster) identifyAgent(local, remote net.Addr) string {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if !lok || !rok {
		return ""
	}
	<-c.built
	inode, err := socketInode(r.Port, l.Port)
	if err != nil {
		return ""
	}
	for _, a := range c.Agents {
		a.mu.Lock()
		p := a.proc
		a.mu.Unlock()
		if p != nil && !p.exited() && ownsSocket(p.pid(), inode) {
			return a.NodeID
		}
	}
	return ""
}
