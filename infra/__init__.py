"""The CDK app's stacks and constructs: ``cdk deploy`` puts one statestore instance in an AWS account."""
