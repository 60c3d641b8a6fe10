//go:build tools

// Package localcluster names the commands scripts/local-cluster.sh builds, so that `go mod tidy`
// keeps every module they need in go.mod and go.sum. It is never compiled (build tag "tools").
package localcluster

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
