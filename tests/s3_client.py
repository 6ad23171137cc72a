"""Run by moto's own venv (tests/s3_fixtures.py), whose boto3 cannot share the tests' venv (botocore pins
python-dateutil below the version the kubernetes client needs): one S3 or IAM call per run, JSON on stdout.

    s3_client.py ENDPOINT setup BUCKET              the IAM user allowed s3:*, its access key, the bucket: the key
    s3_client.py ENDPOINT keys BUCKET KEY SECRET    the bucket's object keys, as that key reads them
"""

import json
import sys

import boto3
import botocore.exceptions

REGION = "us-east-1"


def client(service: str, endpoint: str, key: str, secret: str):
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key,
                        aws_secret_access_key=secret)


def main(endpoint: str, command: str, bucket: str, *credentials: str) -> object:
    if command == "setup":
        iam = client("iam", endpoint, "setup", "setup")  # unsigned: the server's setup actions
        iam.create_user(UserName="gcu-stack")
        iam.put_user_policy(UserName="gcu-stack", PolicyName="state", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="gcu-stack")["AccessKey"]
        client("s3", endpoint, key["AccessKeyId"], key["SecretAccessKey"]).create_bucket(Bucket=bucket)
        return {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    if command == "keys":
        try:
            listed = client("s3", endpoint, *credentials).list_objects_v2(Bucket=bucket)
        except botocore.exceptions.ClientError as error:
            return {"error": error.response["Error"]["Code"]}
        return {"keys": [o["Key"] for o in listed.get("Contents", [])]}
    raise SystemExit(f"s3_client.py: unknown command {command!r}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
