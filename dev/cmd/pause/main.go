// Command pause is the sandbox ("pause") container of the dev clusters'
// nodes: it holds the pod's namespaces and waits to be stopped. Built
// statically into the pause image by `make images`.
//
// It doubles as the dev clusters' test workload, since their nodes hold no
// other image: `pause serve ADDR` answers HTTP on ADDR and logs a line a
// second (what the e2e suite reaches with logs -f and port-forward), and
// `pause echo WORDS...` prints WORDS and exits (exec).
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "echo":
			fmt.Println(strings.Join(os.Args[2:], " "))
			return
		case "serve":
			if len(os.Args) != 3 {
				fmt.Fprintln(os.Stderr, "usage: pause serve ADDR")
				os.Exit(2)
			}
			go serve(os.Args[2])
		default:
			fmt.Fprintf(os.Stderr, "pause: unknown command %q (want echo or serve)\n", os.Args[1])
			os.Exit(2)
		}
	}
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

func serve(addr string) {
	host, _ := os.Hostname()
	go func() {
		for i := 1; ; i++ {
			fmt.Printf("tick %d\n", i)
			time.Sleep(time.Second)
		}
	}()
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
