// Command pause is the sandbox ("pause") container of the dev clusters'
// nodes: it holds the pod's namespaces and waits to be stopped. Built
// statically into the pause image by `make images`.
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of a pod sharing its PID namespace, reap orphans.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGCHLD)
	go func() {
		for {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
				time.Sleep(time.Second) // no children yet
			}
		}
	}()
	<-sig
}
