"""The plan: the blueprint resolved once into every object the stack declares, as plain data, and its rules.

`objects.build(settings)` builds it; `rules.problems(plan)` holds it to the API server's, the kubelet's,
Helm's and server-side apply's rules; the stack declares exactly it (`components/declare/stack.py`).
"""
