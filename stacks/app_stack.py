"""The props every stack of the Stage takes, declared once: the typed configuration and the
stack's description, plus the cluster for the stacks that deploy into it.

Like the CDK's own ``XxxProps extends StackProps`` interfaces, as ``TypedDict``s that a stack's
``**props`` unpacks: a stack adds only its own keyword arguments, and mypy checks every call.
Nothing else reaches a stack (its environment is the Stage's), and the log settings every
construct needs are derived here once, from ``logRetentionDays`` and ``retainLogs``.
"""

from __future__ import annotations

from typing import TypedDict, Unpack

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_pd_eks.config import AppConfig
from ray_pd_eks.logs import log_policy


class AppStackProps(TypedDict):
    """What the Stage gives every stack: the app's ``config`` and the stack's ``description``."""

    config: AppConfig
    description: str


class InClusterStackProps(AppStackProps):
    """The props of a stack that deploys into the EKS ``cluster`` (from the cluster stack),
    and ``providers``, the cluster stack's scope for the machinery of this stack's waiters."""

    cluster: eks.Cluster
    providers: Construct


class AppStack(Stack):
    """A stack of the app: ``config``, and ``log_policy`` for the log groups of its constructs
    (the readiness check's and the capacity watch's are kept on delete whatever its removal
    policy says)."""

    def __init__(self, scope: Construct, construct_id: str, **props: Unpack[AppStackProps]) -> None:
        super().__init__(scope, construct_id, description=props["description"])
        self.config = props["config"]
        self.log_policy = log_policy(self.config)


class InClusterStack(AppStack):
    """A stack of the app that deploys into the EKS cluster: also ``cluster``, and
    ``providers`` (where its waiters' functions and Providers are created, in the cluster
    stack)."""

    def __init__(
        self, scope: Construct, construct_id: str, **props: Unpack[InClusterStackProps]
    ) -> None:
        super().__init__(
            scope, construct_id, config=props["config"], description=props["description"]
        )
        self.cluster = props["cluster"]
        self.providers = props["providers"]
