// Command gosleep is the smallest Go program that waits: make bench
// reads its memory as the floor any init written in Go starts from,
// beside a sandbox's init and coreutils' sleep.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	<-c
}
