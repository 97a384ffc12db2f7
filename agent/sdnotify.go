package agent

import (
	"net"
	"os"
)

// sdNotify sends state to systemd when the agent runs under Type=notify
// (NOTIFY_SOCKET is set), and does nothing otherwise. A leading '@' names an
// abstract socket.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
