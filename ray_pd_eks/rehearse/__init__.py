"""Rehearse the app's Serve config on this machine's own CPU or GPU before a deploy.

Owns: starting the real serving plane (Ray head and worker nodes, Ray Serve LLM, vLLM, NIXL)
from the rendered RayService (``plane``), the small model it can write (``model``), and the
questions asked of it with the readiness check's own code (``probe``). Used by the CLI's
``rehearse`` command, the serving tier (``tests_serving/``) and its GPU run. May import the
rest of ``ray_pd_eks`` (bottom layer); never Ray or vLLM themselves: those run in the serving
venv, as separate processes.
"""
