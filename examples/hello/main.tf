variable "name" {
  type        = string
  description = "Who to greet."
  default     = "world"
}

output "greeting" {
  description = "The greeting."
  value       = "hello, ${var.name}"
}
