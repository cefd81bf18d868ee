# `terraform init` here installs demo/hello/null from a local gitreg (see ../../README.md).
module "hello" {
  source  = "registry.example.test/demo/hello/null"
  version = "~> 1.1"
}

output "greeting" {
  value = module.hello.greeting
}
