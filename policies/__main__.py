"""The gcu-stack policy pack: `pulumi preview --policy-pack policies`. The rules live in gcu_policies/."""

from pulumi_policy import PolicyPack

from gcu_policies import ALL_POLICIES, PACK_NAME

PolicyPack(name=PACK_NAME, policies=ALL_POLICIES)
