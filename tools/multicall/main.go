//go:build harmony_multicall

// Command kube is every Kubernetes binary a Harmony image carries in one
// executable, chosen by the name it is run as (kubeadm, kubelet, kubectl,
// kube-proxy, kube-apiserver, kube-controller-manager, kube-scheduler;
// each a symbolic link to it). The seven share most of their code, so one
// binary is about a quarter of their sizes together, which is what keeps
// n and n-1 in a node image small.
//
// scripts/build-kubernetes.sh builds it inside the tools/ module of a
// version, beside each component's own main function, taken unchanged
// from that version's cmd/<name> and renamed main_<name>; so each
// component starts exactly as its upstream binary does. The build tag
// keeps this file out of the repository's own module, where those
// functions do not exist.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// commands maps each name to its upstream main.
var commands = map[string]func(){
	"kubeadm":                 main_kubeadm,
	"kubelet":                 main_kubelet,
	"kubectl":                 main_kubectl,
	"kube-proxy":              main_kube_proxy,
	"kube-apiserver":          main_kube_apiserver,
	"kube-controller-manager": main_kube_controller_manager,
	"kube-scheduler":          main_kube_scheduler,
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := commands[name]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "%s: run this binary as one of %s (a symbolic link named so)\n", name, strings.Join(names, ", "))
		os.Exit(2)
	}
	run()
}
