"""The shape every custom resource that calls the Kubernetes API shares
(pd_constructs/lifecycle/kubernetes_waiter.py): its access entry's group is the one its RBAC
binds, the resource runs only once both are in place, and only a polling waiter answers events from
outside the VPC."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import CfnResource, Stack
from constructs import IConstruct

from pd_constructs.lifecycle.kubernetes_waiter import KubernetesWaiter, group_rbac
from pd_constructs.lifecycle.recreate import RayServiceRecreate
from pd_constructs.readiness.readiness import ReadinessCheck
from pd_constructs.serving.ray_auth import RayAuthToken
from tests.synth import Synthesized, resolve

RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}


def _waiters(app: Synthesized) -> list[KubernetesWaiter]:
    return [c for c in app.stage.node.find_all() if isinstance(c, KubernetesWaiter)]


def _logical_id(construct: IConstruct) -> str:
    cfn = construct if isinstance(construct, CfnResource) else construct.node.default_child
    assert isinstance(cfn, CfnResource)
    return Stack.of(construct).get_logical_id(cfn)


def _resource(app: Synthesized, construct: IConstruct) -> dict[str, Any]:
    template = app.templates[Stack.of(construct).node.id]
    return dict(template["Resources"][_logical_id(construct)])


def test_each_waiter_binds_its_access_entry_group_and_runs_after_both(
    default_app: Synthesized,
) -> None:
    waiters = _waiters(default_app)
    assert sorted(type(w).__name__ for w in waiters) == sorted(
        c.__name__ for c in (ReadinessCheck, RayServiceRecreate, RayAuthToken)
    )
    for waiter in waiters:
        entry = _resource(default_app, waiter.access_entry)["Properties"]
        (group,) = entry["KubernetesGroups"]
        role_id = _resource(default_app, waiter.function)["Properties"]["Role"]["Fn::GetAtt"][0]
        assert entry["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
        objects = json.loads(resolve(_resource(default_app, waiter.rbac)["Properties"]["Manifest"]))
        bindings = [o for o in objects if o["kind"].endswith("Binding")]
        assert bindings, type(waiter).__name__
        for binding in bindings:
            assert binding["subjects"] == [
                {"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}
            ]
        depends_on = set(_resource(default_app, waiter.resource)["DependsOn"])
        needed = [waiter.access_entry, waiter.rbac, *waiter.objects.values()]
        # What lives in another stack (the machinery created beside the cluster) is there
        # before this stack starts: a stack dependency, not a DependsOn.
        here = [c for c in needed if Stack.of(c) is Stack.of(waiter)]
        assert {_logical_id(c) for c in here} <= depends_on, type(waiter).__name__
        for other in needed:
            if Stack.of(other) is not Stack.of(waiter):
                assert Stack.of(other) in Stack.of(waiter).dependencies, type(waiter).__name__


def test_only_a_polling_waiter_answers_events_from_outside_the_vpc(
    default_app: Synthesized,
) -> None:
    shapes = {}
    for waiter in _waiters(default_app):
        on_event = _resource(default_app, waiter.on_event)["Properties"]
        caller = _resource(default_app, waiter.function)["Properties"]
        home = waiter.provider_home
        state_machines = [c for c in home.node.find_all() if c.node.id == "waiter-state-machine"]
        assert "VpcConfig" in caller
        shapes[type(waiter).__name__] = (
            waiter.on_event is waiter.function,
            "VpcConfig" in on_event,
            len(state_machines),
        )
    assert shapes == {
        "ReadinessCheck": (False, False, 1),
        "RayServiceRecreate": (False, False, 1),
        "RayAuthToken": (True, True, 0),
    }


def test_group_rbac_is_cluster_wide_only_with_cluster_rules() -> None:
    namespaced = group_rbac(name="n", group="g", namespace="ns", rules=[RULE])
    assert [o["kind"] for o in namespaced] == ["Role", "RoleBinding"]
    assert all(o["metadata"]["namespace"] == "ns" for o in namespaced)
    both = group_rbac(name="n", group="g", namespace="ns", rules=[RULE], cluster_rules=[RULE])
    assert [o["kind"] for o in both] == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    assert "namespace" not in both[0]["metadata"] and both[0]["rules"] == [RULE]
    assert [o["roleRef"] for o in both if o["kind"].endswith("Binding")] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "n"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "n"},
    ]
