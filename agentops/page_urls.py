from django.urls import path

from agentops import views

urlpatterns = [
    path("", views.home, name="home"),
    path("invitations/<str:token>/", views.invitation_accept, name="invitation_accept"),
]
