"""A realistic module for the details' tests: README, variables, outputs, calls."""

from __future__ import annotations

from pathlib import Path

from tests.support.repos import GitRepo

README = """# terraform-aws-vpc

[![CI](https://ci.example.com/badge.svg)](https://ci.example.com)

Creates a **VPC** with public and private [subnets](https://docs.example.com/subnets),
NAT gateways and flow logs.

## Usage

```hcl
module "vpc" { source = "acme/vpc/aws" }
```
"""


VARIABLES = """
variable "name" {
  type        = string
  description = "Name prefix of every resource."
  validation {
    condition     = length(var.name) > 0 && length(var.name) <= 32
    error_message = "The name must be 1-32 characters."
  }
}

variable "az_count" {
  type    = number
  default = 3
  validation {
    condition     = var.az_count >= 1
    error_message = "At least one availability zone."
  }
}

variable "scale" {
  type    = number
  default = -1.5e3
}

variable "enable_nat" {
  type    = bool
  default = false
}

variable "cidrs" {
  type    = list(string)
  default = ["10.0.0.0/24", "10.0.1.0/24"]
}

variable "tags" {
  type        = map(string)
  default     = { Team = "net", "cost-center" = "42" }
  description = <<-EOT
    Tags for every resource.
    Merged with the provider's default tags.
  EOT
}

variable "flow_logs" {
  type = object({
    enabled   = bool
    retention = optional(number, 30)
    bucket    = optional(string)
  })
  default = null
}

variable "extra" {
  type    = any
  default = {}
}

variable "untyped" {}

variable "db_password" {
  type      = string
  sensitive = true
  default   = ""
}
"""


OUTPUTS = """
output "vpc_id" {
  description = "The ID of the VPC."
  value       = aws_vpc.this.id
}

output "db_password" {
  description = "Echoed for the demo."
  value       = var.db_password
  sensitive   = true
}
"""


MAIN = """
resource "aws_vpc" "this" {
  cidr_block = var.cidrs[0]
  tags       = var.tags
}

resource "aws_subnet" "private" {
  count  = var.az_count
  vpc_id = aws_vpc.this.id
}

data "aws_availability_zones" "all" {}

module "labels" {
  source  = "acme/labels/null"
  version = "~> 1.2"
}

module "network" {
  source = "./modules/network"
  name   = var.name
}
"""


VERSIONS = """
terraform {
  required_version = ">= 1.3"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
    cloudinit = {
      source = "acme-corp/cloudinit"
    }
    random = ">= 3.1"
  }
}
"""


def realistic_module(base: Path) -> GitRepo:
    """terraform-aws-vpc: root module, two submodules (one with a broken file), a README-only dir."""
    repo = GitRepo(base, "terraform-aws-vpc")
    repo.commit(
        {
            "README.md": README,
            "variables.tf": VARIABLES,
            "outputs.tf": OUTPUTS,
            "main.tf": MAIN,
            "versions.tf": VERSIONS,
            "examples/basic/main.tf": 'module "vpc" { source = "../.." }\n',  # not a submodule
            "modules/network/README.md": "# Network\n\nSubnets and routes.\n",
            "modules/network/main.tf": 'variable "name" { type = string }\nresource "aws_route_table" "private" {}\n'
            'output "route_table_id" { value = aws_route_table.private.id }\n',
            "modules/flaky/good.tf": 'variable "ok" {\n  default = "yes"\n}\n',
            "modules/flaky/broken.tf": 'variable "oops" {\n  type = \n',
            "modules/docs-only/README.md": "# Nothing to deploy here\n",
        }
    )
    repo.tag("v1.0.0")
    return repo
