//go:build tools

// Package localcluster names the commands of k8s.io/kubernetes the tier needs, so that `go mod
// tidy` keeps every module they need in go.mod and go.sum. It is never compiled (build tag
// "tools"). scripts/local-cluster.sh builds the three servers; kubectl stays listed so that the
// module graph (and so the servers' dependency versions) is the one they were first built with,
// though the tier now takes the upstream kubectl from the pinned kubectl layer package.
package localcluster

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
