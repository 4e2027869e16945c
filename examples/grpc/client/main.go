// Command client calls demo.v1.Greeter/Hello of the example server six
// times and prints each call's status code: five OKs with the quota left,
// then ResourceExhausted with the policy and when to retry.
//
//	go run ./grpc/client -addr 127.0.0.1:50051
//
// The address defaults to ADDR, or else 127.0.0.1:50051.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	grpclimit "github.com/slidelimit/slidelimit/grpcinterceptor"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func main() {
	def := os.Getenv("ADDR")
	if def == "" {
		def = "127.0.0.1:50051"
	}
	addr := flag.String("addr", def, "server address")
	n := flag.Int("n", 6, "number of calls")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := run(ctx, *addr, *n, os.Stdout)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
}

// run calls Hello n times on the server at addr and writes one line per call.
func run(ctx context.Context, addr string, n int, w io.Writer) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer conn.Close()
	for i := 1; i <= n; i++ {
		var header metadata.MD
		_, err := callHello(ctx, conn, "Ann", grpc.Header(&header))
		st := status.Convert(err)
		line := fmt.Sprintf("call %d: %v", i, st.Code())
		if err == nil {
			if r := header.Get("x-ratelimit-remaining"); len(r) > 0 {
				line += " (remaining " + r[0] + ")"
			}
		} else {
			line += describe(st)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// describe says which policy refused a call and when to retry.
func describe(st *status.Status) string {
	s := ""
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.GetViolations()) > 0 {
			s += "policy " + qf.GetViolations()[0].GetSubject() + ", "
		}
	}
	if d, ok := grpclimit.RetryDelay(st.Err()); ok {
		s += "retry in " + d.String()
	} else {
		s += st.Message()
	}
	return " (" + s + ")"
}
