"""The Azure stop function's HTTP entry point fails the invocation when the alert could not be acted on.

Azure Functions counts an HTTP-triggered invocation as a failed request only when the function raises; one that
returns 500 counts as a success (Azure/azure-functions-host#6511), and the stop-failure alert watches failed
requests (goldenenv.clouds.azure.budget.FAILED_METRIC). So a budget that cannot be read must make budget_alert
raise, or nobody is told.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from goldenenv.clouds.azure.stopfn import function_app as stopfn


def registered_module():
    """function_app.py loaded with a stand-in for azure.functions whose decorators keep the functions as they are."""

    class FunctionApp:
        def __init__(self, **kwargs):
            pass

        def __getattr__(self, kind):
            return lambda *args, **kwargs: (lambda fn: fn)

    fake = types.ModuleType("azure.functions")
    fake.FunctionApp = FunctionApp
    fake.AuthLevel = types.SimpleNamespace(ANONYMOUS="ANONYMOUS", FUNCTION="FUNCTION")
    fake.HttpResponse = lambda body, status_code, mimetype: (body, status_code, mimetype)
    package = types.ModuleType("azure")
    package.functions = fake
    saved = {k: sys.modules.get(k) for k in ("azure", "azure.functions", "stopfn_alert_entry")}
    spec = importlib.util.spec_from_file_location("stopfn_alert_entry", stopfn.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules.update({"azure": package, "azure.functions": fake, "stopfn_alert_entry": module})
    try:
        spec.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module


def test_an_alert_that_could_not_be_acted_on_raises_so_the_failure_alert_fires():
    module = registered_module()
    request = types.SimpleNamespace(get_body=lambda: b"{}")
    module.handle_alert = lambda body: (500, {"failed": ["cannot read the budget b (HTTP 403)"], "deallocated": []})
    with pytest.raises(RuntimeError, match="cannot read the budget b"):
        module.budget_alert(request)
    module.handle_alert = lambda body: (200, {"failed": [], "deallocated": ["gpu/0"]})
    body, status, _ = module.budget_alert(request)
    assert status == 200 and "gpu/0" in body
