"""A module as real ones look: a terraform-docs README, many inputs of every kind, submodules, examples.

For the page tests (a 200-input module must not widen a phone's screen) and for the README's
screenshots (bench/ui_screenshots.py), so both show the same kind of module.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.repos import GitRepo

# (name, type, default or None when required, description): what an AWS VPC module declares.
VPC_INPUTS: list[tuple[str, str, str | None, str]] = [
    ("name", "string", None, "Name to be used on all the resources as identifier."),
    ("cidr", "string", None, "The IPv4 CIDR block for the VPC, e.g. `10.0.0.0/16`."),
    ("azs", "list(string)", None, "A list of availability zone names or IDs in the region."),
    ("public_subnets", "list(string)", "[]", "A list of public subnets inside the VPC."),
    ("private_subnets", "list(string)", "[]", "A list of private subnets inside the VPC."),
    ("database_subnets", "list(string)", "[]", "A list of database subnets inside the VPC."),
    ("intra_subnets", "list(string)", "[]", "A list of intra subnets inside the VPC: no route to the Internet."),
    ("secondary_cidr_blocks", "list(string)", "[]", "Secondary CIDR blocks to associate with the VPC."),
    ("instance_tenancy", "string", '"default"', "A tenancy option for instances launched into the VPC."),
    ("enable_dns_hostnames", "bool", "true", "Should be true to enable DNS hostnames in the VPC."),
    ("enable_dns_support", "bool", "true", "Should be true to enable DNS support in the VPC."),
    ("enable_ipv6", "bool", "false", "Requests an Amazon-provided IPv6 CIDR block with a /56 prefix length."),
    ("enable_nat_gateway", "bool", "false", "Should be true to provision NAT Gateways for the private networks."),
    ("single_nat_gateway", "bool", "false", "Provision a single shared NAT Gateway across all private networks."),
    ("one_nat_gateway_per_az", "bool", "false", "Only one NAT gateway in each availability zone."),
    ("reuse_nat_ips", "bool", "false", "Reuse the Elastic IPs passed in `external_nat_ip_ids`."),
    ("external_nat_ip_ids", "list(string)", "[]", "IDs of the Elastic IPs to reuse for the NAT gateways."),
    ("create_igw", "bool", "true", "Controls if an Internet Gateway is created for public subnets."),
    ("map_public_ip_on_launch", "bool", "false", "Assign a public IP address to instances in public subnets."),
    ("enable_flow_log", "bool", "false", "Whether or not to enable VPC Flow Logs."),
    ("flow_log_destination_type", "string", '"cloud-watch-logs"', "`cloud-watch-logs` or `s3`."),
    ("flow_log_traffic_type", "string", '"ALL"', "The type of traffic to capture: `ACCEPT`, `REJECT` or `ALL`."),
    ("flow_log_retention_in_days", "number", "90", "Days to retain the flow log events in CloudWatch."),
    ("manage_default_security_group", "bool", "true", "Adopt and manage the default security group."),
    (
        "default_security_group_ingress",
        "list(map(string))",
        '[{ self = true, from_port = 0, to_port = 0, protocol = "-1", description = "All traffic from members" }]',
        "Ingress rules of the default security group (none by default: nothing gets in).",
    ),
    (
        "default_security_group_egress",
        "list(map(string))",
        '[{ cidr_blocks = "0.0.0.0/0", from_port = 0, to_port = 0, protocol = "-1" }]',
        "Egress rules of the default security group.",
    ),
    (
        "dhcp_options",
        (
            "object({\n    domain_name          = optional(string)\n    domain_name_servers  = optional(list(string), "
            '["AmazonProvidedDNS"])\n    ntp_servers          = optional(list(string), [])\n'
            "    netbios_name_servers = optional(list(string), [])\n    netbios_node_type    = optional(number)\n  })"
        ),
        "{}",
        "DHCP options of the VPC: a domain name, name servers, NTP servers and NetBIOS settings.",
    ),
    ("tags", "map(string)", "{}", "A map of tags to add to all resources."),
    ("vpc_tags", "map(string)", "{}", "Additional tags for the VPC."),
    ("public_subnet_tags", "map(string)", '{ "kubernetes.io/role/elb" = "1" }', "Additional public subnet tags."),
]

MAIN_TF = """terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.30"
    }
  }
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
}

resource "aws_subnet" "public" {
  count  = length(var.public_subnets)
  vpc_id = aws_vpc.this.id
}

resource "aws_subnet" "private" {
  count  = length(var.private_subnets)
  vpc_id = aws_vpc.this.id
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id
}

resource "aws_nat_gateway" "this" {
  count     = var.enable_nat_gateway ? 1 : 0
  subnet_id = aws_subnet.public[0].id
}

resource "aws_eip" "nat" {
  count = var.enable_nat_gateway ? 1 : 0
}

module "flow_log" {
  source = "./modules/flow-log"
  vpc_id = aws_vpc.this.id
}

module "labels" {
  source  = "{host}/acme/labels/null"
  version = "~> 1.2"
}

module "endpoints" {
  source  = "terraform-aws-modules/vpc/aws//modules/vpc-endpoints"
  version = "~> 5.0"
}
"""

OUTPUTS = [
    ("vpc_id", "The ID of the VPC."),
    ("vpc_arn", "The ARN of the VPC."),
    ("vpc_cidr_block", "The CIDR block of the VPC."),
    ("public_subnets", "List of IDs of public subnets."),
    ("private_subnets", "List of IDs of private subnets."),
    ("nat_public_ips", "List of public Elastic IPs created for the NAT gateways."),
    ("igw_id", "The ID of the Internet Gateway."),
]


def variable(name: str, type_: str, default: str | None, description: str) -> str:
    """One `variable` block as HCL."""
    text = f'variable "{name}" {{\n  description = "{description}"\n  type        = {type_}\n'
    if default is not None:
        text += f"  default     = {default}\n"
    return text + "}\n\n"


def terraform_docs(name: str, inputs: list[tuple[str, str, str | None, str]], outputs: list[tuple[str, str]]) -> str:
    """The part of a README terraform-docs writes: its markers, anchors and tables, as it writes them."""
    lines = ["<!-- BEGIN_TF_DOCS -->", "## Requirements", "", "| Name | Version |", "|------|---------|"]
    lines += ['| <a name="requirement_aws"></a> [aws](#requirement\\_aws) | >= 5.30 |', "", "## Inputs", ""]
    lines += [
        "| Name | Description | Type | Default | Required |",
        "|------|-------------|------|---------|:--------:|",
    ]
    for n, t, d, desc in inputs:
        shown_type = t.replace("\n", "<br>").replace("|", "\\|")
        default = "n/a" if d is None else f"`{d}`"
        required = "yes" if d is None else "no"
        lines.append(
            f'| <a name="input_{n}"></a> [{n}](#input\\_{n}) | {desc} | `{shown_type}` | {default} | {required} |'
        )
    lines += ["", "## Outputs", "", "| Name | Description |", "|------|-------------|"]
    lines += [f'| <a name="output_{n}"></a> [{n}](#output\\_{n}) | {desc} |' for n, desc in outputs]
    return "\n".join([*lines, "<!-- END_TF_DOCS -->", ""])


def vpc_readme(host: str) -> str:
    """A README as real modules have: what it does, usage, then terraform-docs' tables."""
    return (
        "# AWS VPC Terraform module\n\n"
        "Creates a VPC with public, private and database subnets across availability zones, NAT gateways, "
        "flow logs and a locked-down default security group.\n\n"
        "## Usage\n\n"
        f'```hcl\nmodule "vpc" {{\n  source  = "{host}/acme/vpc/aws"\n  version = "~> 5.4"\n\n'
        '  name = "platform"\n  cidr = "10.0.0.0/16"\n\n  azs             = ["eu-west-1a", "eu-west-1b"]\n'
        '  private_subnets = ["10.0.1.0/24", "10.0.2.0/24"]\n  public_subnets  = ["10.0.101.0/24", "10.0.102.0/24"]\n'
        "\n  enable_nat_gateway = true\n}\n```\n\n"
        "## NAT gateway scenarios\n\n"
        "- One NAT gateway per subnet (default)\n- A single shared NAT gateway: `single_nat_gateway = true`\n"
        "- One NAT gateway per availability zone: `one_nat_gateway_per_az = true`\n\n"
        + terraform_docs("vpc", VPC_INPUTS, OUTPUTS)
    )


def write_vpc_module(repo: GitRepo, host: str, extra_inputs: int = 0) -> None:
    """Commit the VPC module (and `extra_inputs` more inputs, some with long unbroken names and values)."""
    inputs = list(VPC_INPUTS)
    for i in range(extra_inputs):
        long = i % 10 == 0
        name = f"input_{i:03d}" + ("_with_a_very_long_unbroken_name_that_goes_on_and_on" if long else "")
        default = None if i % 3 == 0 else ('"' + "x" * 300 + '"' if long else f'"value-{i}"')
        inputs.append((name, "string", default, "A" + "b" * 200 if long else f"Setting number {i}."))
    files: dict[str, str | None] = {
        "README.md": vpc_readme(host),
        "main.tf": MAIN_TF.replace("{host}", host),
        "variables.tf": "".join(variable(*v) for v in inputs),
        "outputs.tf": "".join(f'output "{n}" {{\n  description = "{d}"\n  value = "x"\n}}\n\n' for n, d in OUTPUTS),
        "modules/flow-log/README.md": "# Flow log\n\nVPC flow logs to CloudWatch Logs or S3.\n",
        "modules/flow-log/main.tf": (
            variable("vpc_id", "string", None, "The VPC to log.")
            + variable("retention_in_days", "number", "90", "Days to keep the events.")
            + 'resource "aws_flow_log" "this" {\n  vpc_id = var.vpc_id\n}\n'
            + 'output "flow_log_id" {\n  description = "The flow log ID."\n  value = "x"\n}\n'
        ),
        "modules/endpoints/main.tf": (
            variable("vpc_id", "string", None, "The VPC.")
            + variable("services", "list(string)", '["s3", "dynamodb"]', "Gateway endpoints to create.")
            + 'resource "aws_vpc_endpoint" "this" {\n  vpc_id = var.vpc_id\n}\n'
        ),
        "examples/complete/README.md": "# Complete VPC\n\nEvery feature of the module at once.\n",
        "examples/complete/main.tf": 'module "vpc" {\n  source = "../.."\n  name = "complete"\n}\n',
        "examples/simple/main.tf": 'module "vpc" {\n  source = "../.."\n  name = "simple"\n}\n',
    }
    repo.commit(files, "VPC module")


def labels_module(root: Path) -> GitRepo:
    """A small module the VPC module depends on (through this registry)."""
    repo = GitRepo(root, "terraform-null-labels")
    repo.commit(
        {
            "README.md": "# Labels\n\nConsistent names and tags.\n",
            "main.tf": variable("name", "string", None, "A name."),
        }
    )
    repo.tag("v1.2.0")
    return repo
