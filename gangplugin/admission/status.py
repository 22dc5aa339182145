"""Conditions of the check's own objects: the AdmissionCheck's Active, the GangPolicy's Valid."""

from __future__ import annotations

from gangplugin.admission.writes import CheckWriter
from gangplugin.core.errors import InputError
from gangplugin.core.names import ADMISSION_CHECK_CONTROLLER
from gangplugin.kube import kueue_records as rec
from gangplugin.kube.resources import ADMISSION_CHECKS, GANG_POLICIES
from gangplugin.readmodel.model import ReadModel


class ConfigStatus:
    def __init__(self, model: ReadModel, writer: CheckWriter) -> None:
        self.model = model
        self.writer = writer

    def sync_check(self, name: str) -> None:
        ac = self.model.admission_checks.get(name)
        if ac is None or (ac.get("spec") or {}).get("controllerName") != ADMISSION_CHECK_CONTROLLER:
            return
        try:
            self.model.checks.settings(rec.policy_name_of_check(ac))
            status, reason, message = "True", "Active", "the gangplugin.io/gang controller is ready"
        except InputError as err:
            status, reason, message = "False", "InvalidParameters", str(err)
        self.writer.set_condition(ADMISSION_CHECKS, ac, "Active", status, reason, message)

    def sync_policy(self, name: str) -> None:
        obj = self.model.policies.get(name)
        if obj is None:
            return
        try:
            self.model.levels(rec.gang_policy_from_k8s(obj))
            status, reason, message = "True", "Valid", "the policy is usable"
        except InputError as err:
            status, reason, message = "False", "Invalid", str(err)
        if (
            self.writer.set_condition(GANG_POLICIES, obj, "Valid", status, reason, message)
            and status == "False"
        ):
            self.writer.event(obj, "Warning", "InvalidGangPolicy", message)
