"""Conditions of the check's own objects: the AdmissionCheck's Active, the GangPolicy's Valid."""

from __future__ import annotations

from gangplugin.admission.view import AdmissionView
from gangplugin.admission.writes import CheckWriter
from gangplugin.core.errors import InputError
from gangplugin.core.names import (
    ADMISSION_CHECK_CONTROLLER,
)
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES


class ConfigStatus:
    def __init__(self, view: AdmissionView, writer: CheckWriter) -> None:
        self.view = view
        self.writer = writer

    def sync_check(self, name: str) -> None:
        ac = self.view.checks.get(name)
        if ac is None or (ac.get("spec") or {}).get("controllerName") != ADMISSION_CHECK_CONTROLLER:
            return
        try:
            policy = self.view.policy(rec.policy_name_of_check(ac))
            self.view.levels(policy)
            status, reason, message = "True", "Active", "the gangplugin.io/gang controller is ready"
        except InputError as err:
            status, reason, message = "False", "InvalidParameters", str(err)
        self.writer.set_condition(ADMISSION_CHECKS, ac, "Active", status, reason, message)

    def sync_policy(self, name: str) -> None:
        obj = self.view.policies.get(name)
        if obj is None:
            return
        try:
            self.view.levels(rec.gang_policy_from_k8s(obj))
            status, reason, message = "True", "Valid", "the policy is usable"
        except InputError as err:
            status, reason, message = "False", "Invalid", str(err)
        if (
            self.writer.set_condition(GANG_POLICIES, obj, "Valid", status, reason, message)
            and status == "False"
        ):
            self.writer.event(obj, "Warning", "InvalidGangPolicy", message)
