"""Declaring the plan: the stack's and each component's Pulumi resources, the Kubernetes objects, and the status.

`stack.GcuStack` walks the chain and declares exactly the checked plan (components/plan/); `component.GcuComponent`
declares one component's objects under their logical names; `k8s` turns a manifest into a pulumi-kubernetes
resource; `status` computes the GcuResource-shaped stack outputs.
"""
