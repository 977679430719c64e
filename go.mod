module github.com/sandboxd/sandboxd

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/dennwc/btrfs v0.0.0-20240418142341-0167142bde7a
	github.com/godbus/dbus/v5 v5.2.4
	github.com/mistifyio/go-zfs/v4 v4.0.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/dennwc/ioctl v1.0.0 // indirect
	github.com/google/uuid v1.2.0 // indirect
	github.com/urfave/cli/v3 v3.14.0 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
)
