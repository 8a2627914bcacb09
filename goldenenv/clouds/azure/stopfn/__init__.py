"""The stop function's code, shipped alone to Azure Functions (function_app.py, host.json); see
goldenenv/clouds/azure/budget.py."""
