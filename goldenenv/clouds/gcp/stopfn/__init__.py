"""The stop function's code, shipped alone to Cloud Functions (main.py); see goldenenv/clouds/gcp/budget.py."""
